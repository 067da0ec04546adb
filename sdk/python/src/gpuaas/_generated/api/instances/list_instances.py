from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.instance_list import InstanceList
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast
from uuid import UUID



def _get_kwargs(
    *,
    project: UUID | Unset = UNSET,
    state: str | Unset = UNSET,
    tag: str | Unset = UNSET,
    cursor: str | Unset = UNSET,
    limit: int | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    json_project: str | Unset = UNSET
    if not isinstance(project, Unset):
        json_project = str(project)
    params["project"] = json_project

    params["state"] = state

    params["tag"] = tag

    params["cursor"] = cursor

    params["limit"] = limit


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/instances",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> InstanceList | Problem | None:
    if response.status_code == 200:
        response_200 = InstanceList.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[InstanceList | Problem]:
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
    state: str | Unset = UNSET,
    tag: str | Unset = UNSET,
    cursor: str | Unset = UNSET,
    limit: int | Unset = UNSET,

) -> Response[InstanceList | Problem]:
    """ The instances the token reaches, newest first.

     A page at a time: pass `next_cursor` back as `cursor` for the next.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.
        state (str | Unset):
        tag (str | Unset):
        cursor (str | Unset):
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[InstanceList | Problem]
     """


    kwargs = _get_kwargs(
        project=project,
state=state,
tag=tag,
cursor=cursor,
limit=limit,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,
    state: str | Unset = UNSET,
    tag: str | Unset = UNSET,
    cursor: str | Unset = UNSET,
    limit: int | Unset = UNSET,

) -> InstanceList | Problem | None:
    """ The instances the token reaches, newest first.

     A page at a time: pass `next_cursor` back as `cursor` for the next.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.
        state (str | Unset):
        tag (str | Unset):
        cursor (str | Unset):
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        InstanceList | Problem
     """


    return sync_detailed(
        client=client,
project=project,
state=state,
tag=tag,
cursor=cursor,
limit=limit,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,
    state: str | Unset = UNSET,
    tag: str | Unset = UNSET,
    cursor: str | Unset = UNSET,
    limit: int | Unset = UNSET,

) -> Response[InstanceList | Problem]:
    """ The instances the token reaches, newest first.

     A page at a time: pass `next_cursor` back as `cursor` for the next.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.
        state (str | Unset):
        tag (str | Unset):
        cursor (str | Unset):
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[InstanceList | Problem]
     """


    kwargs = _get_kwargs(
        project=project,
state=state,
tag=tag,
cursor=cursor,
limit=limit,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    project: UUID | Unset = UNSET,
    state: str | Unset = UNSET,
    tag: str | Unset = UNSET,
    cursor: str | Unset = UNSET,
    limit: int | Unset = UNSET,

) -> InstanceList | Problem | None:
    """ The instances the token reaches, newest first.

     A page at a time: pass `next_cursor` back as `cursor` for the next.

    Args:
        project (UUID | Unset): A project inside a tenant: the operational scope that owns
            resources.
        state (str | Unset):
        tag (str | Unset):
        cursor (str | Unset):
        limit (int | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        InstanceList | Problem
     """


    return (await asyncio_detailed(
        client=client,
project=project,
state=state,
tag=tag,
cursor=cursor,
limit=limit,

    )).parsed
