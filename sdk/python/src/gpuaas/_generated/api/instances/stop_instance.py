from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.allocation_detail import AllocationDetail
from ...models.problem import Problem
from typing import cast
from uuid import UUID



def _get_kwargs(
    id: UUID,

) -> dict[str, Any]:
    

    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/instances/{id}/stop".format(id=quote(str(id), safe=""),),
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> AllocationDetail | Problem | None:
    if response.status_code == 202:
        response_202 = AllocationDetail.from_dict(response.json())



        return response_202

    if response.status_code == 401:
        response_401 = Problem.from_dict(response.json())



        return response_401

    if response.status_code == 403:
        response_403 = Problem.from_dict(response.json())



        return response_403

    if response.status_code == 404:
        response_404 = Problem.from_dict(response.json())



        return response_404

    if response.status_code == 409:
        response_409 = Problem.from_dict(response.json())



        return response_409

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())



        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[AllocationDetail | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    id: UUID,
    *,
    client: AuthenticatedClient,

) -> Response[AllocationDetail | Problem]:
    """ Stops an instance.

     The guest shuts down and its boot disk is saved on the region's storage; then its GPUs are
    released and wiped, and it costs only its disk (at the region's storage price) until it is
    started again. Its id, name, keys, tags, ports and attached volumes stay. Idempotent: a
    stopping or stopped instance answers the same. Audited with the token's id.

    Args:
        id (UUID):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AllocationDetail | Problem]
     """


    kwargs = _get_kwargs(
        id=id,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: UUID,
    *,
    client: AuthenticatedClient,

) -> AllocationDetail | Problem | None:
    """ Stops an instance.

     The guest shuts down and its boot disk is saved on the region's storage; then its GPUs are
    released and wiped, and it costs only its disk (at the region's storage price) until it is
    started again. Its id, name, keys, tags, ports and attached volumes stay. Idempotent: a
    stopping or stopped instance answers the same. Audited with the token's id.

    Args:
        id (UUID):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AllocationDetail | Problem
     """


    return sync_detailed(
        id=id,
client=client,

    ).parsed

async def asyncio_detailed(
    id: UUID,
    *,
    client: AuthenticatedClient,

) -> Response[AllocationDetail | Problem]:
    """ Stops an instance.

     The guest shuts down and its boot disk is saved on the region's storage; then its GPUs are
    released and wiped, and it costs only its disk (at the region's storage price) until it is
    started again. Its id, name, keys, tags, ports and attached volumes stay. Idempotent: a
    stopping or stopped instance answers the same. Audited with the token's id.

    Args:
        id (UUID):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AllocationDetail | Problem]
     """


    kwargs = _get_kwargs(
        id=id,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: UUID,
    *,
    client: AuthenticatedClient,

) -> AllocationDetail | Problem | None:
    """ Stops an instance.

     The guest shuts down and its boot disk is saved on the region's storage; then its GPUs are
    released and wiped, and it costs only its disk (at the region's storage price) until it is
    started again. Its id, name, keys, tags, ports and attached volumes stay. Idempotent: a
    stopping or stopped instance answers the same. Audited with the token's id.

    Args:
        id (UUID):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AllocationDetail | Problem
     """


    return (await asyncio_detailed(
        id=id,
client=client,

    )).parsed
