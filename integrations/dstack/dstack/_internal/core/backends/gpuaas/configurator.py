import json

from dstack._internal.core.backends.base.configurator import (
    BackendRecord,
    Configurator,
    raise_invalid_credentials_error,
)
from dstack._internal.core.backends.gpuaas import api_client
from dstack._internal.core.backends.gpuaas.backend import GpuaasBackend
from dstack._internal.core.backends.gpuaas.models import (
    GpuaasBackendConfig,
    GpuaasBackendConfigWithCreds,
    GpuaasConfig,
    GpuaasCreds,
    GpuaasStoredConfig,
)
from dstack._internal.core.models.backends.base import BackendType


class GpuaasConfigurator(
    Configurator[
        GpuaasBackendConfig,
        GpuaasBackendConfigWithCreds,
    ]
):
    TYPE = BackendType.GPUAAS
    BACKEND_CLASS = GpuaasBackend

    def validate_config(self, config: GpuaasBackendConfigWithCreds, default_creds_enabled: bool):
        client = api_client.GpuaasAPIClient(config.api_url, config.creds.token, config.project)
        if not client.validate_token():
            raise_invalid_credentials_error(fields=[["creds", "token"], ["project"]])

    def create_backend(
        self, project_name: str, config: GpuaasBackendConfigWithCreds
    ) -> BackendRecord:
        return BackendRecord(
            config=GpuaasStoredConfig(
                **GpuaasBackendConfig.__response__.parse_obj(config).dict()
            ).json(),
            auth=GpuaasCreds.parse_obj(config.creds).json(),
        )

    def get_backend_config_with_creds(self, record: BackendRecord) -> GpuaasBackendConfigWithCreds:
        config = self._get_config(record)
        return GpuaasBackendConfigWithCreds.__response__.parse_obj(config)

    def get_backend_config_without_creds(self, record: BackendRecord) -> GpuaasBackendConfig:
        config = self._get_config(record)
        return GpuaasBackendConfig.__response__.parse_obj(config)

    def get_backend(self, record: BackendRecord) -> GpuaasBackend:
        config = self._get_config(record)
        return GpuaasBackend(config=config)

    def _get_config(self, record: BackendRecord) -> GpuaasConfig:
        return GpuaasConfig.__response__(
            **json.loads(record.config),
            creds=GpuaasCreds.parse_raw(record.auth),
        )
