from dstack._internal.core.backends.base.backend import Backend
from dstack._internal.core.backends.gpuaas.compute import GpuaasCompute
from dstack._internal.core.backends.gpuaas.models import GpuaasConfig
from dstack._internal.core.models.backends.base import BackendType


class GpuaasBackend(Backend):
    TYPE = BackendType.GPUAAS
    COMPUTE_CLASS = GpuaasCompute

    def __init__(self, config: GpuaasConfig):
        self.config = config
        self._compute = GpuaasCompute(self.config)

    def compute(self) -> GpuaasCompute:
        return self._compute
