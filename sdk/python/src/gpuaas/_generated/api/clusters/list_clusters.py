from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.cluster_list import ClusterList
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast
from uuid import UUID



def _get_kwargs(
    *,
    project: UUID | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_project: str | Unset = UNSET
    if not isinstance(project, Unset):
        json_project = str(project)
    params["project"] = json_project


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/clusters",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> ClusterList | Problem | None:
    if response.status_code == 200:
        response_200 = ClusterList.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())



        return response_400

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())



        return response_404

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())



        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[ClusterList | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,

) -> Response[ClusterList | Problem]:
    """ The clusters the token reaches: those not released, and those released in the last day.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ClusterList | Problem]
     """


    kwargs = _get_kwargs(
        project=project,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,

) -> ClusterList | Problem | None:
    """ The clusters the token reaches: those not released, and those released in the last day.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ClusterList | Problem
     """


    return sync_detailed(
        client=client,
project=project,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,

) -> Response[ClusterList | Problem]:
    """ The clusters the token reaches: those not released, and those released in the last day.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[ClusterList | Problem]
     """


    kwargs = _get_kwargs(
        project=project,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,

) -> ClusterList | Problem | None:
    """ The clusters the token reaches: those not released, and those released in the last day.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        ClusterList | Problem
     """


    return (await asyncio_detailed(
        client=client,
project=project,

    )).parsed
