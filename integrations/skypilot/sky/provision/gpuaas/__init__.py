"""GPUaaS provisioner for SkyPilot."""

from sky.provision.gpuaas.config import bootstrap_instances
from sky.provision.gpuaas.instance import cleanup_ports
from sky.provision.gpuaas.instance import get_cluster_info
from sky.provision.gpuaas.instance import query_instances
from sky.provision.gpuaas.instance import query_ports
from sky.provision.gpuaas.instance import run_instances
from sky.provision.gpuaas.instance import stop_instances
from sky.provision.gpuaas.instance import terminate_instances
from sky.provision.gpuaas.instance import wait_instances

__all__ = ('bootstrap_instances', 'run_instances', 'stop_instances',
           'terminate_instances', 'wait_instances', 'get_cluster_info',
           'cleanup_ports', 'query_instances', 'query_ports')
