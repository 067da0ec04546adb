"""GPUaaS: a self-service GPU cloud's portal, through its public API.

Instance types are the deployment's SKUs (``h100.1x``, ``h100.8x.metal``);
regions are its regions; images are its marketplace listings, chosen with
``image_id`` (``ubuntu-24.04-cuda`` unless set). Credentials: an API token with
the ``read`` and ``launch`` scopes in ``~/.gpuaas/config``.
"""
import typing
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from sky import catalog
from sky import clouds
from sky.provision.gpuaas import gpuaas_utils
from sky.utils import registry
from sky.utils import resources_utils

if typing.TYPE_CHECKING:
    from sky import resources as resources_lib
    from sky.utils import volume as volume_lib

_CLOUD = 'gpuaas'
_DEFAULT_IMAGE = 'ubuntu-24.04-cuda'
_DEFAULT_SSH_USER = 'ubuntu'
_CREDENTIAL_HELP = (
    'Make an API token with the read and launch scopes on your GPUaaS '
    'portal (Account → API tokens) and write it to '
    f'{gpuaas_utils.CREDENTIAL_FILE}:\n'
    '    api = https://<portal>/api/v1\n'
    '    token = gpk_...\n'
    '    project = <project id>   # if the token reaches more than one')


@registry.CLOUD_REGISTRY.register
class GPUaaS(clouds.Cloud):
    """GPUaaS GPU cloud."""

    _REPR = 'GPUaaS'
    _CLOUD_UNSUPPORTED_FEATURES = {
        clouds.CloudImplementationFeatures.AUTOSTOP:
            ('Autostop is not supported on GPUaaS yet: use sky stop.'),
        clouds.CloudImplementationFeatures.CLONE_DISK_FROM_CLUSTER:
            ('Disk cloning is not supported on GPUaaS.'),
        clouds.CloudImplementationFeatures.SPOT_INSTANCE:
            ('GPUaaS does not sell spot instances.'),
        clouds.CloudImplementationFeatures.DOCKER_IMAGE:
            ('Docker images are not supported on GPUaaS yet.'),
        clouds.CloudImplementationFeatures.CUSTOM_DISK_TIER:
            ('Each GPUaaS instance type has its own disk.'),
        clouds.CloudImplementationFeatures.CUSTOM_NETWORK_TIER:
            ('Custom network tiers are not supported on GPUaaS.'),
        clouds.CloudImplementationFeatures.STORAGE_MOUNTING:
            ('Mounting object stores is not supported on GPUaaS.'),
        clouds.CloudImplementationFeatures.HOST_CONTROLLERS:
            ('Host controllers are not supported on GPUaaS yet.'),
        clouds.CloudImplementationFeatures.HIGH_AVAILABILITY_CONTROLLERS:
            ('High availability controllers are not supported on GPUaaS.'),
        clouds.CloudImplementationFeatures.CUSTOM_MULTI_NETWORK:
            ('Custom multiple networks are not supported on GPUaaS.'),
        clouds.CloudImplementationFeatures.LOCAL_DISK:
            ('Local disks are part of each GPUaaS instance type.'),
    }
    # Nodes are named `<cluster>-<generation>-worker-<i>`, within the API's 63.
    _MAX_CLUSTER_NAME_LEN_LIMIT = 40

    PROVISIONER_VERSION = clouds.ProvisionerVersion.SKYPILOT
    STATUS_VERSION = clouds.StatusVersion.SKYPILOT
    OPEN_PORTS_VERSION = clouds.OpenPortsVersion.LAUNCH_ONLY

    @classmethod
    def _unsupported_features_for_resources(
        cls,
        resources: 'resources_lib.Resources',
        region: Optional[str] = None,
    ) -> Dict[clouds.CloudImplementationFeatures, str]:
        del resources, region  # unused
        return cls._CLOUD_UNSUPPORTED_FEATURES

    @classmethod
    def _max_cluster_name_length(cls) -> Optional[int]:
        return cls._MAX_CLUSTER_NAME_LEN_LIMIT

    @classmethod
    def regions_with_offering(
        cls,
        instance_type: str,
        accelerators: Optional[Dict[str, int]],
        use_spot: bool,
        region: Optional[str],
        zone: Optional[str],
        resources: Optional['resources_lib.Resources'] = None,
    ) -> List[clouds.Region]:
        del accelerators, resources  # unused
        if use_spot or zone is not None:
            return []
        regions = catalog.get_region_zones_for_instance_type(
            instance_type, use_spot, _CLOUD)
        if region is not None:
            regions = [r for r in regions if r.name == region]
        return regions

    @classmethod
    def get_vcpus_mem_from_instance_type(
        cls,
        instance_type: str,
    ) -> Tuple[Optional[float], Optional[float]]:
        return catalog.get_vcpus_mem_from_instance_type(instance_type,
                                                        clouds=_CLOUD)

    @classmethod
    def zones_provision_loop(
        cls,
        *,
        region: str,
        num_nodes: int,
        instance_type: str,
        accelerators: Optional[Dict[str, int]] = None,
        use_spot: bool = False,
    ) -> Iterator[None]:
        del num_nodes  # unused
        regions = cls.regions_with_offering(instance_type,
                                            accelerators,
                                            use_spot,
                                            region=region,
                                            zone=None)
        for r in regions:
            assert r.zones is None, r
            yield r.zones

    def instance_type_to_hourly_cost(self,
                                     instance_type: str,
                                     use_spot: bool,
                                     region: Optional[str] = None,
                                     zone: Optional[str] = None) -> float:
        return catalog.get_hourly_cost(instance_type,
                                       use_spot=use_spot,
                                       region=region,
                                       zone=zone,
                                       clouds=_CLOUD)

    def accelerators_to_hourly_cost(self,
                                    accelerators: Dict[str, int],
                                    use_spot: bool,
                                    region: Optional[str] = None,
                                    zone: Optional[str] = None) -> float:
        """GPUs are part of the instance type's price."""
        del accelerators, use_spot, region, zone  # unused
        return 0.0

    def get_egress_cost(self, num_gigabytes: float) -> float:
        return 0.0

    @classmethod
    def get_default_instance_type(
        cls,
        cpus: Optional[str] = None,
        memory: Optional[str] = None,
        disk_tier: Optional[resources_utils.DiskTier] = None,
        local_disk: Optional[str] = None,
        region: Optional[str] = None,
        zone: Optional[str] = None,
        use_spot: bool = False,
        max_hourly_cost: Optional[float] = None,
    ) -> Optional[str]:
        return catalog.get_default_instance_type(
            cpus=cpus,
            memory=memory,
            disk_tier=disk_tier,
            local_disk=local_disk,
            region=region,
            zone=zone,
            use_spot=use_spot,
            max_hourly_cost=max_hourly_cost,
            clouds=_CLOUD)

    @classmethod
    def get_accelerators_from_instance_type(
            cls, instance_type: str) -> Optional[Dict[str, Union[int, float]]]:
        return catalog.get_accelerators_from_instance_type(instance_type,
                                                           clouds=_CLOUD)

    @classmethod
    def get_zone_shell_cmd(cls) -> Optional[str]:
        return None

    def make_deploy_resources_variables(
        self,
        resources: 'resources_lib.Resources',
        cluster_name: resources_utils.ClusterName,
        region: 'clouds.Region',
        zones: Optional[List['clouds.Zone']],
        num_nodes: int,
        dryrun: bool = False,
        volume_mounts: Optional[List['volume_lib.VolumeMount']] = None,
    ) -> Dict[str, Any]:
        del cluster_name, zones, num_nodes, volume_mounts  # unused
        resources = resources.assert_launchable()
        acc_dict = self.get_accelerators_from_instance_type(
            resources.instance_type)
        custom_resources = resources_utils.make_ray_custom_resources_str(
            acc_dict)
        if resources.image_id is None:
            image_id = _DEFAULT_IMAGE
        else:
            image_id = resources.image_id.get(
                region.name, resources.image_id.get(None, _DEFAULT_IMAGE))
        return {
            'instance_type': resources.instance_type,
            'custom_resources': custom_resources,
            'region': region.name,
            'image_id': image_id,
            'ssh_user': (_DEFAULT_SSH_USER if dryrun else _ssh_user(image_id)),
        }

    def _get_feasible_launchable_resources(
        self, resources: 'resources_lib.Resources'
    ) -> 'resources_utils.FeasibleResources':
        if resources.use_spot:
            return resources_utils.FeasibleResources(
                [], [], 'GPUaaS does not sell spot instances.')
        if resources.instance_type is not None:
            assert resources.is_launchable(), resources
            resources = resources.copy(accelerators=None)
            return resources_utils.FeasibleResources([resources], [], None)

        def _make(instance_list):
            return [
                resources.copy(
                    cloud=GPUaaS(),
                    instance_type=instance_type,
                    accelerators=None,
                    cpus=None,
                ) for instance_type in instance_list
            ]

        accelerators = resources.accelerators
        if accelerators is None:
            default_instance_type = GPUaaS.get_default_instance_type(
                cpus=resources.cpus,
                memory=resources.memory,
                disk_tier=resources.disk_tier,
                local_disk=resources.local_disk,
                region=resources.region,
                zone=resources.zone,
                use_spot=resources.use_spot,
                max_hourly_cost=resources.max_hourly_cost)
            if default_instance_type is None:
                return resources_utils.FeasibleResources([], [], None)
            return resources_utils.FeasibleResources(
                _make([default_instance_type]), [], None)

        assert len(accelerators) == 1, resources
        acc, acc_count = list(accelerators.items())[0]
        (instance_list,
         fuzzy_candidate_list) = catalog.get_instance_type_for_accelerator(
             acc,
             acc_count,
             use_spot=resources.use_spot,
             cpus=resources.cpus,
             memory=resources.memory,
             region=resources.region,
             zone=resources.zone,
             max_hourly_cost=resources.max_hourly_cost,
             clouds=_CLOUD)
        if instance_list is None:
            return resources_utils.FeasibleResources([], fuzzy_candidate_list,
                                                     None)
        return resources_utils.FeasibleResources(_make(instance_list),
                                                 fuzzy_candidate_list, None)

    @classmethod
    def _check_compute_credentials(cls) -> Tuple[bool, Optional[str]]:
        """Checks the token in the credential file against the deployment."""
        try:
            client = gpuaas_utils.GpuaasClient.from_credentials()
        except (OSError, ValueError) as e:
            return False, f'{e}\n{_CREDENTIAL_HELP}'
        try:
            projects = client.projects()
        except gpuaas_utils.GpuaasApiError as e:
            return False, f'The deployment refused the token: {e}'
        except Exception as e:  # pylint: disable=broad-except
            return False, f'Could not reach {client.api}: {e}'
        if client.project is None and len(projects) != 1:
            return False, (f'The token reaches {len(projects)} projects: name '
                           f'one with `project = ...` in '
                           f'{gpuaas_utils.CREDENTIAL_FILE}.')
        if client.project is not None and client.project not in {
                p['id'] for p in projects
        }:
            return False, (f'The token does not reach project '
                           f'{client.project}.')
        return True, None

    def get_credential_file_mounts(self) -> Dict[str, str]:
        return {
            gpuaas_utils.CREDENTIAL_FILE: gpuaas_utils.CREDENTIAL_FILE,
        }

    @classmethod
    def get_user_identities(cls) -> Optional[List[List[str]]]:
        return None

    def instance_type_exists(self, instance_type: str) -> bool:
        return catalog.instance_type_exists(instance_type, _CLOUD)

    def validate_region_zone(self, region: Optional[str], zone: Optional[str]):
        return catalog.validate_region_zone(region, zone, clouds=_CLOUD)

    @classmethod
    def get_image_size(cls, image_id: str, region: Optional[str]) -> float:
        # Each instance type has its own disk; the image fits it.
        del image_id, region  # unused
        return 0.0


def _ssh_user(image_id: str) -> str:
    """The user the image's instances are reached as, from the project's
    images; the default user if the image is not listed for it (the launch
    then names the problem)."""
    try:
        images = gpuaas_utils.GpuaasClient.from_credentials().images()
    except Exception:  # pylint: disable=broad-except
        return _DEFAULT_SSH_USER
    for image in images:
        if image['slug'] == image_id:
            return image['ssh_user']
    return _DEFAULT_SSH_USER
