from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.new_snapshot import NewSnapshot
from ...models.problem import Problem
from ...models.snapshot import Snapshot
from ...types import UNSET, Unset
from typing import cast
from uuid import UUID



def _get_kwargs(
    id: UUID,
    *,
    body: NewSnapshot,
    idempotency_key: None | str | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key



    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/volumes/{id}/snapshots".format(id=quote(str(id), safe=""),),
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Problem | Snapshot | None:
    if response.status_code == 201:
        response_201 = Snapshot.from_dict(response.json())



        return response_201

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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Problem | Snapshot]:
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
    body: NewSnapshot,
    idempotency_key: None | str | Unset = UNSET,

) -> Response[Problem | Snapshot]:
    """ Takes a snapshot of a volume that is available or attached.

     It starts `creating` and becomes `available` once the storage backend has copied the
    volume (atomically, even while it is written). It counts for the `max_volume_gib` quota
    and is billed by size at the region's storage price. With an `Idempotency-Key`, a retry
    of the same request answers the same snapshot.

    Args:
        id (UUID):
        idempotency_key (None | str | Unset):
        body (NewSnapshot): A snapshot to take. Example: {'name': 'before-upgrade'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | Snapshot]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,
idempotency_key=idempotency_key,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    id: UUID,
    *,
    client: AuthenticatedClient,
    body: NewSnapshot,
    idempotency_key: None | str | Unset = UNSET,

) -> Problem | Snapshot | None:
    """ Takes a snapshot of a volume that is available or attached.

     It starts `creating` and becomes `available` once the storage backend has copied the
    volume (atomically, even while it is written). It counts for the `max_volume_gib` quota
    and is billed by size at the region's storage price. With an `Idempotency-Key`, a retry
    of the same request answers the same snapshot.

    Args:
        id (UUID):
        idempotency_key (None | str | Unset):
        body (NewSnapshot): A snapshot to take. Example: {'name': 'before-upgrade'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | Snapshot
     """


    return sync_detailed(
        id=id,
client=client,
body=body,
idempotency_key=idempotency_key,

    ).parsed

async def asyncio_detailed(
    id: UUID,
    *,
    client: AuthenticatedClient,
    body: NewSnapshot,
    idempotency_key: None | str | Unset = UNSET,

) -> Response[Problem | Snapshot]:
    """ Takes a snapshot of a volume that is available or attached.

     It starts `creating` and becomes `available` once the storage backend has copied the
    volume (atomically, even while it is written). It counts for the `max_volume_gib` quota
    and is billed by size at the region's storage price. With an `Idempotency-Key`, a retry
    of the same request answers the same snapshot.

    Args:
        id (UUID):
        idempotency_key (None | str | Unset):
        body (NewSnapshot): A snapshot to take. Example: {'name': 'before-upgrade'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Problem | Snapshot]
     """


    kwargs = _get_kwargs(
        id=id,
body=body,
idempotency_key=idempotency_key,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    id: UUID,
    *,
    client: AuthenticatedClient,
    body: NewSnapshot,
    idempotency_key: None | str | Unset = UNSET,

) -> Problem | Snapshot | None:
    """ Takes a snapshot of a volume that is available or attached.

     It starts `creating` and becomes `available` once the storage backend has copied the
    volume (atomically, even while it is written). It counts for the `max_volume_gib` quota
    and is billed by size at the region's storage price. With an `Idempotency-Key`, a retry
    of the same request answers the same snapshot.

    Args:
        id (UUID):
        idempotency_key (None | str | Unset):
        body (NewSnapshot): A snapshot to take. Example: {'name': 'before-upgrade'}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Problem | Snapshot
     """


    return (await asyncio_detailed(
        id=id,
client=client,
body=body,
idempotency_key=idempotency_key,

    )).parsed
