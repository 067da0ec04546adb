from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.allocation_detail import AllocationDetail
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast
from uuid import UUID



def _get_kwargs(
    id: UUID,
    *,
    wait: int | Unset = UNSET,
    if_none_match: None | str | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(if_none_match, Unset):
        headers["If-None-Match"] = if_none_match



    

    params: dict[str, Any] = {}

    params["wait"] = wait


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/instances/{id}".format(id=quote(str(id), safe=""),),
        "params": params,
    }


    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> AllocationDetail | Any | Problem | None:
    if response.status_code == 200:
        response_200 = AllocationDetail.from_dict(response.json())



        return response_200

    if response.status_code == 304:
        response_304 = cast(Any, None)
        return response_304

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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[AllocationDetail | Any | Problem]:
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
    wait: int | Unset = UNSET,
    if_none_match: None | str | Unset = UNSET,

) -> Response[AllocationDetail | Any | Problem]:
    """ One instance, and how to connect to it.

     Its lifecycle state, the phases its node reported, how to reach it (the SSH command and the
    published ports, once running), and its history.

    Every answer carries an `ETag`. To wait for a change without polling, send it back as
    `If-None-Match` with `?wait=30`: the answer comes as soon as something changes (a state, a
    phase), or as `304` after 30 seconds.

    Args:
        id (UUID):
        wait (int | Unset):
        if_none_match (None | str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AllocationDetail | Any | Problem]
     """


    kwargs = _get_kwargs(
        id=id,
wait=wait,
if_none_match=if_none_match,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: UUID,
    *,
    client: AuthenticatedClient,
    wait: int | Unset = UNSET,
    if_none_match: None | str | Unset = UNSET,

) -> AllocationDetail | Any | Problem | None:
    """ One instance, and how to connect to it.

     Its lifecycle state, the phases its node reported, how to reach it (the SSH command and the
    published ports, once running), and its history.

    Every answer carries an `ETag`. To wait for a change without polling, send it back as
    `If-None-Match` with `?wait=30`: the answer comes as soon as something changes (a state, a
    phase), or as `304` after 30 seconds.

    Args:
        id (UUID):
        wait (int | Unset):
        if_none_match (None | str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AllocationDetail | Any | Problem
     """


    return sync_detailed(
        id=id,
client=client,
wait=wait,
if_none_match=if_none_match,

    ).parsed

async def asyncio_detailed(
    id: UUID,
    *,
    client: AuthenticatedClient,
    wait: int | Unset = UNSET,
    if_none_match: None | str | Unset = UNSET,

) -> Response[AllocationDetail | Any | Problem]:
    """ One instance, and how to connect to it.

     Its lifecycle state, the phases its node reported, how to reach it (the SSH command and the
    published ports, once running), and its history.

    Every answer carries an `ETag`. To wait for a change without polling, send it back as
    `If-None-Match` with `?wait=30`: the answer comes as soon as something changes (a state, a
    phase), or as `304` after 30 seconds.

    Args:
        id (UUID):
        wait (int | Unset):
        if_none_match (None | str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AllocationDetail | Any | Problem]
     """


    kwargs = _get_kwargs(
        id=id,
wait=wait,
if_none_match=if_none_match,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: UUID,
    *,
    client: AuthenticatedClient,
    wait: int | Unset = UNSET,
    if_none_match: None | str | Unset = UNSET,

) -> AllocationDetail | Any | Problem | None:
    """ One instance, and how to connect to it.

     Its lifecycle state, the phases its node reported, how to reach it (the SSH command and the
    published ports, once running), and its history.

    Every answer carries an `ETag`. To wait for a change without polling, send it back as
    `If-None-Match` with `?wait=30`: the answer comes as soon as something changes (a state, a
    phase), or as `304` after 30 seconds.

    Args:
        id (UUID):
        wait (int | Unset):
        if_none_match (None | str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AllocationDetail | Any | Problem
     """


    return (await asyncio_detailed(
        id=id,
client=client,
wait=wait,
if_none_match=if_none_match,

    )).parsed
