"""GPUaaS: a self-service GPU cloud's portal, through its public API.

Offers are the deployment's SKUs per region, priced by its operator and marked available when
placement would accept a launch now (`launchable`). Instances are VMs (GPU slices) and bare-metal
hosts booting a marketplace listing that accepts user data; dstack's shim is started by that
user data (cloud-init), so nothing is run over SSH from the server.
"""

import hashlib
import re
from typing import Any, Dict, List, Optional

from dstack._internal.core.backends.base.backend import Compute
from dstack._internal.core.backends.base.compute import (
    ComputeWithAllOffersCached,
    ComputeWithCreateInstanceSupport,
    ComputeWithMultinodeSupport,
    ComputeWithPrivilegedSupport,
    generate_unique_instance_name,
    get_user_data,
)
from dstack._internal.core.backends.gpuaas.api_client import GpuaasAPIClient
from dstack._internal.core.backends.gpuaas.models import GpuaasConfig
from dstack._internal.core.errors import ProvisioningError
from dstack._internal.core.models.backends.base import BackendType
from dstack._internal.core.models.instances import (
    Disk,
    Gpu,
    InstanceAvailability,
    InstanceConfiguration,
    InstanceOfferWithAvailability,
    InstanceType,
    Resources,
)
from dstack._internal.core.models.placement import PlacementGroup
from dstack._internal.core.models.runs import JobProvisioningData
from dstack._internal.utils.logging import get_logger

logger = get_logger(__name__)

# The API's limit on instance names.
MAX_INSTANCE_NAME_LEN = 63
DEFAULT_IMAGE = "ubuntu-24.04-cuda"
# The instance's state as the API projects it: these have not ended.
_LIVE = ("placed", "provisioning", "running")

# Device memory of the models whose names do not say it, in GiB.
_DEVICE_MEMORY_GIB = {"L40S": 48, "L40": 48, "L4": 24, "A10": 24, "A40": 48, "T4": 16}


class GpuaasCompute(
    ComputeWithAllOffersCached,
    ComputeWithCreateInstanceSupport,
    ComputeWithPrivilegedSupport,
    ComputeWithMultinodeSupport,
    Compute,
):
    def __init__(self, config: GpuaasConfig):
        super().__init__()
        self.config = config
        self.api_client = GpuaasAPIClient(config.api_url, config.creds.token, config.project)

    def get_all_offers_with_availability(self) -> List[InstanceOfferWithAvailability]:
        return [
            offer_from(o)
            for o in self.api_client.offers()
            if o["gpu_count"] > 0 and (not self.config.regions or o["region"] in self.config.regions)
        ]

    def create_instance(
        self,
        instance_offer: InstanceOfferWithAvailability,
        instance_config: InstanceConfiguration,
        placement_group: Optional[PlacementGroup],
    ) -> JobProvisioningData:
        name = instance_name(instance_config)
        image = self.config.image or DEFAULT_IMAGE
        keys = instance_config.get_public_keys()
        body: Dict[str, Any] = {
            "sku": instance_offer.instance.name,
            "region": instance_offer.region,
            "image": image,
            "name": name,
            "ssh_public_keys": keys,
            "user_data": get_user_data(authorized_keys=keys),
            "tags": {"dstack-instance": name},
        }
        # A capacity refusal raises NoCapacityError, and dstack tries its next offer.
        launched = self.api_client.launch(body, idempotency_key=_idempotency_key(name))
        return JobProvisioningData(
            backend=instance_offer.backend,
            instance_type=instance_offer.instance,
            instance_id=launched["id"],
            hostname=None,
            internal_ip=None,
            region=instance_offer.region,
            price=instance_offer.price,
            username=_ssh_user(self.api_client, image),
            ssh_port=None,
            dockerized=True,
            ssh_proxy=None,
            backend_data=None,
        )

    def update_provisioning_data(
        self,
        provisioning_data: JobProvisioningData,
        project_ssh_public_key: str,
        project_ssh_private_key: str,
    ):
        instance = self.api_client.instance(provisioning_data.instance_id)
        state = instance["projected"]
        if state not in _LIVE:
            raise ProvisioningError(
                f"GPUaaS instance {instance['name']} is {state}: {instance.get('failure') or ''}"
            )
        endpoint = instance.get("ssh_endpoint")
        if state == "running" and endpoint:
            provisioning_data.hostname = endpoint["host"]
            provisioning_data.internal_ip = endpoint["host"]
            provisioning_data.ssh_port = endpoint["port"]
            provisioning_data.username = endpoint["user"]

    def terminate_instance(
        self, instance_id: str, region: str, backend_data: Optional[str] = None
    ) -> None:
        # Releasing is idempotent; one released already answers the same.
        self.api_client.release(instance_id)


def offer_from(offer: Dict[str, Any]) -> InstanceOfferWithAvailability:
    name = gpu_name(offer["gpu_model"])
    gpu = Gpu(name=name, memory_mib=gpu_memory_mib(offer["gpu_model"]))
    resources = Resources(
        cpus=offer["vcpus"],
        memory_mib=offer["memory_gib"] * 1024,
        gpus=[gpu] * offer["gpu_count"],
        spot=False,
        disk=Disk(size_mib=offer["disk_gib"] * 1024),
    )
    return InstanceOfferWithAvailability(
        backend=BackendType.GPUAAS,
        instance=InstanceType(name=offer["sku"], resources=resources),
        region=offer["region"],
        price=offer["price_per_hour"]["amount_minor"] / 100,
        availability=(
            InstanceAvailability.AVAILABLE
            if offer["launchable"] > 0
            else InstanceAvailability.NOT_AVAILABLE
        ),
    )


def gpu_name(gpu_model: str) -> str:
    """gpuhunt's short name: 'NVIDIA H100 80GB HBM3' -> 'H100', 'NVIDIA L40S' -> 'L40S'."""
    words = gpu_model.split()
    if words and words[0].upper() in ("NVIDIA", "AMD", "INTEL"):
        words = words[1:]
    return words[0].split("-")[0] if words else gpu_model


def gpu_memory_mib(gpu_model: str) -> int:
    match = re.search(r"(\d+)\s*GB", gpu_model)
    if match:
        return int(match.group(1)) * 1024
    return _DEVICE_MEMORY_GIB.get(gpu_name(gpu_model), 0) * 1024


def instance_name(instance_config: InstanceConfiguration) -> str:
    """dstack's unique name, in the API's alphabet (lowercase letters, digits and '-')."""
    name = generate_unique_instance_name(instance_config, max_length=MAX_INSTANCE_NAME_LEN)
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")


def _idempotency_key(name: str) -> str:
    # dstack makes a new unique name for each provisioning attempt, so a key from it is one
    # intended launch: a retry of the same call is answered with the same instance.
    return "dstack-" + hashlib.sha256(name.encode()).hexdigest()[:40]


def _ssh_user(client: GpuaasAPIClient, image: str) -> str:
    for listing in client.images():
        if listing["slug"] == image:
            return listing["ssh_user"]
    return "ubuntu"
