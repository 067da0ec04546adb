from typing import Annotated, List, Literal, Optional, Union

from pydantic import Field

from dstack._internal.core.models.common import CoreModel


class GpuaasAPITokenCreds(CoreModel):
    type: Annotated[Literal["api_token"], Field(description="The type of credentials")] = (
        "api_token"
    )
    token: Annotated[
        str,
        Field(description="An API token (`gpk_...`) with the `read` and `launch` scopes"),
    ]


AnyGpuaasCreds = GpuaasAPITokenCreds
GpuaasCreds = AnyGpuaasCreds


class GpuaasBackendConfig(CoreModel):
    type: Annotated[Literal["gpuaas"], Field(description="The type of backend")] = "gpuaas"
    api_url: Annotated[
        str,
        Field(description="The deployment's API, e.g. `https://portal.example/api/v1`"),
    ]
    project: Annotated[
        Optional[str],
        Field(description="The project to launch in. Omit if the token reaches one project"),
    ] = None
    regions: Annotated[
        Optional[List[str]],
        Field(description="The list of regions. Omit to use all regions"),
    ] = None
    image: Annotated[
        Optional[str],
        Field(
            description=(
                "The marketplace listing instances boot (it must accept user data)."
                " Defaults to `ubuntu-24.04-cuda`"
            )
        ),
    ] = None


class GpuaasBackendConfigWithCreds(GpuaasBackendConfig):
    creds: Annotated[AnyGpuaasCreds, Field(description="The credentials")]


AnyGpuaasBackendConfig = Union[GpuaasBackendConfig, GpuaasBackendConfigWithCreds]


class GpuaasStoredConfig(GpuaasBackendConfig):
    pass


class GpuaasConfig(GpuaasStoredConfig):
    creds: AnyGpuaasCreds
