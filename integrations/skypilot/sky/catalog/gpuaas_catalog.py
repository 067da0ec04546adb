"""GPUaaS | Catalog

This module loads the catalog of the GPUaaS deployment the user's credentials
name and answers SkyPilot's questions about instance types and prices.

Unlike a public cloud's, the catalog is the deployment's own (each operator
prices its SKUs), so it is fetched from the deployment's ``GET /offers``
rather than from SkyPilot's hosted catalogs, and refreshed hourly. If the
deployment cannot be reached, the last catalog fetched is used.
"""
import os
import tempfile
import time
import typing
from typing import Dict, List, Optional, Tuple, Union

from sky import sky_logging
from sky.adaptors import common as adaptors_common
from sky.catalog import common
from sky.catalog.data_fetchers import fetch_gpuaas
from sky.provision.gpuaas import gpuaas_utils
from sky.utils import ux_utils

if typing.TYPE_CHECKING:
    from sky.clouds import cloud

filelock = adaptors_common.LazyImport('filelock')

logger = sky_logging.init_logger(__name__)

_CATALOG = 'gpuaas/vms.csv'
_PULL_FREQUENCY_SECONDS = 3600


def _update_if_stale() -> bool:
    """Fetches the catalog from the deployment if missing or an hour old."""
    path = common.get_catalog_path(_CATALOG)
    if (os.path.exists(path) and
            os.path.getmtime(path) + _PULL_FREQUENCY_SECONDS > time.time()):
        return False
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with filelock.FileLock(path + '.lock'):
        if (os.path.exists(path) and
                os.path.getmtime(path) + _PULL_FREQUENCY_SECONDS > time.time()):
            return False
        try:
            api = gpuaas_utils.read_credentials()['api']
            with tempfile.NamedTemporaryFile(dir=os.path.dirname(path),
                                             delete=False) as f:
                tmp = f.name
            fetch_gpuaas.create_catalog(api, tmp)
            os.rename(tmp, path)
        except Exception as e:  # pylint: disable=broad-except
            if os.path.exists(path):
                logger.warning(f'Could not refresh the GPUaaS catalog ({e}); '
                               'using the last one fetched.')
                os.utime(path, None)
                return False
            # Without credentials there is no deployment to list: an empty
            # catalog, so that `sky show-gpus` and the optimizer see no
            # offers rather than fail.
            logger.debug(f'No GPUaaS catalog: {e}')
            with open(path, 'w', encoding='utf-8') as f:
                f.write(','.join(fetch_gpuaas.COLUMNS) + '\n')
            os.utime(path, (0, 0))
    return True


_df = common.LazyDataFrame(common.get_catalog_path(_CATALOG),
                           update_if_stale_func=_update_if_stale)


def instance_type_exists(instance_type: str) -> bool:
    return common.instance_type_exists_impl(_df, instance_type)


def validate_region_zone(
        region: Optional[str],
        zone: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
    if zone is not None:
        with ux_utils.print_exception_no_traceback():
            raise ValueError('GPUaaS does not support zones.')
    return common.validate_region_zone_impl('gpuaas', _df, region, zone)


def get_hourly_cost(instance_type: str,
                    use_spot: bool = False,
                    region: Optional[str] = None,
                    zone: Optional[str] = None) -> float:
    """Returns the cost, or the cheapest cost among all zones for spot."""
    if use_spot:
        with ux_utils.print_exception_no_traceback():
            raise ValueError('GPUaaS does not sell spot instances.')
    return common.get_hourly_cost_impl(_df, instance_type, use_spot, region,
                                       zone)


def get_vcpus_mem_from_instance_type(
        instance_type: str) -> Tuple[Optional[float], Optional[float]]:
    return common.get_vcpus_mem_from_instance_type_impl(_df, instance_type)


def get_default_instance_type(cpus: Optional[str] = None,
                              memory: Optional[str] = None,
                              disk_tier: Optional[str] = None,
                              local_disk: Optional[str] = None,
                              region: Optional[str] = None,
                              zone: Optional[str] = None,
                              use_spot: bool = False,
                              max_hourly_cost: Optional[float] = None
                             ) -> Optional[str]:
    del disk_tier, local_disk, zone  # Unused.
    # Every instance type here has GPUs; the default is the cheapest that
    # meets the CPU and memory asked for.
    df = _df if region is None else _df[_df['Region'] == region]
    return common.get_instance_type_for_cpus_mem_impl(
        df, cpus, memory, use_spot=use_spot, max_hourly_cost=max_hourly_cost)


def get_accelerators_from_instance_type(
        instance_type: str) -> Optional[Dict[str, Union[int, float]]]:
    return common.get_accelerators_from_instance_type_impl(_df, instance_type)


def get_instance_type_for_accelerator(
        acc_name: str,
        acc_count: int,
        cpus: Optional[str] = None,
        memory: Optional[str] = None,
        use_spot: bool = False,
        local_disk: Optional[str] = None,
        region: Optional[str] = None,
        zone: Optional[str] = None,
        max_hourly_cost: Optional[float] = None
) -> Tuple[Optional[List[str]], List[str]]:
    """Returns a list of instance types that have the given accelerator."""
    del local_disk  # Unused.
    if zone is not None:
        with ux_utils.print_exception_no_traceback():
            raise ValueError('GPUaaS does not support zones.')
    return common.get_instance_type_for_accelerator_impl(
        df=_df,
        acc_name=acc_name,
        acc_count=acc_count,
        cpus=cpus,
        memory=memory,
        use_spot=use_spot,
        region=region,
        zone=zone,
        max_hourly_cost=max_hourly_cost)


def get_region_zones_for_instance_type(instance_type: str,
                                       use_spot: bool) -> List['cloud.Region']:
    df = _df[_df['InstanceType'] == instance_type]
    return common.get_region_zones(df, use_spot)


def list_accelerators(
        gpus_only: bool,
        name_filter: Optional[str],
        region_filter: Optional[str],
        quantity_filter: Optional[int],
        case_sensitive: bool = True,
        all_regions: bool = False,
        require_price: bool = True) -> Dict[str, List[common.InstanceTypeInfo]]:
    """Returns all instance types in GPUaaS offering GPUs."""
    del require_price  # Unused.
    return common.list_accelerators_impl('GPUaaS', _df, gpus_only, name_filter,
                                         region_filter, quantity_filter,
                                         case_sensitive, all_regions)
