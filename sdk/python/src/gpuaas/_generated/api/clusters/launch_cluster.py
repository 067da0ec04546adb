from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.cluster import Cluster
from ...models.new_cluster import NewCluster
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    body: NewCluster,
    idempotency_key: None | str | Unset = UNSET,

) -> dict[str, Any]:
    headers: dict[str, Any] = {}
    if not isinstance(idempotency_key, Unset):
        headers["Idempotency-Key"] = idempotency_key



    

    

    _kwargs: dict[str, Any] = {
        "method": "post",
        "url": "/clusters",
    }

    _kwargs["json"] = body.to_dict()

    headers["Content-Type"] = "application/json"

    _kwargs["headers"] = headers
    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Cluster | Problem | None:
    if response.status_code == 201:
        response_201 = Cluster.from_dict(response.json())



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


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[Cluster | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    body: NewCluster,
    idempotency_key: None | str | Unset = UNSET,

) -> Response[Cluster | Problem]:
    """ Launches a cluster: every member placed within the locality in one transaction, or none.

     Placement uses as few leaf switches as can hold the members. A refusal for room
    (`sku_unavailable`) says how many would fit within each locality now and what holds nodes
    back. The policy chain counts every member's GPUs and first hour. With an
    `Idempotency-Key`, a retry of the same request answers the same cluster.

    Args:
        idempotency_key (None | str | Unset):
        body (NewCluster): A cluster to launch. Example: {'image': 'ubuntu-24.04-cuda',
            'locality': 'leaf', 'locality_required': True, 'members': 4, 'name': 'llama', 'project':
            '0a0e0000-0000-4000-8001-000000000001', 'sku': 'h100.8x', 'ssh_public_keys': ['ssh-ed25519
            AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop']}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cluster | Problem]
     """


    kwargs = _get_kwargs(
        body=body,
idempotency_key=idempotency_key,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    body: NewCluster,
    idempotency_key: None | str | Unset = UNSET,

) -> Cluster | Problem | None:
    """ Launches a cluster: every member placed within the locality in one transaction, or none.

     Placement uses as few leaf switches as can hold the members. A refusal for room
    (`sku_unavailable`) says how many would fit within each locality now and what holds nodes
    back. The policy chain counts every member's GPUs and first hour. With an
    `Idempotency-Key`, a retry of the same request answers the same cluster.

    Args:
        idempotency_key (None | str | Unset):
        body (NewCluster): A cluster to launch. Example: {'image': 'ubuntu-24.04-cuda',
            'locality': 'leaf', 'locality_required': True, 'members': 4, 'name': 'llama', 'project':
            '0a0e0000-0000-4000-8001-000000000001', 'sku': 'h100.8x', 'ssh_public_keys': ['ssh-ed25519
            AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop']}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Cluster | Problem
     """


    return sync_detailed(
        client=client,
body=body,
idempotency_key=idempotency_key,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    body: NewCluster,
    idempotency_key: None | str | Unset = UNSET,

) -> Response[Cluster | Problem]:
    """ Launches a cluster: every member placed within the locality in one transaction, or none.

     Placement uses as few leaf switches as can hold the members. A refusal for room
    (`sku_unavailable`) says how many would fit within each locality now and what holds nodes
    back. The policy chain counts every member's GPUs and first hour. With an
    `Idempotency-Key`, a retry of the same request answers the same cluster.

    Args:
        idempotency_key (None | str | Unset):
        body (NewCluster): A cluster to launch. Example: {'image': 'ubuntu-24.04-cuda',
            'locality': 'leaf', 'locality_required': True, 'members': 4, 'name': 'llama', 'project':
            '0a0e0000-0000-4000-8001-000000000001', 'sku': 'h100.8x', 'ssh_public_keys': ['ssh-ed25519
            AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop']}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[Cluster | Problem]
     """


    kwargs = _get_kwargs(
        body=body,
idempotency_key=idempotency_key,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    body: NewCluster,
    idempotency_key: None | str | Unset = UNSET,

) -> Cluster | Problem | None:
    """ Launches a cluster: every member placed within the locality in one transaction, or none.

     Placement uses as few leaf switches as can hold the members. A refusal for room
    (`sku_unavailable`) says how many would fit within each locality now and what holds nodes
    back. The policy chain counts every member's GPUs and first hour. With an
    `Idempotency-Key`, a retry of the same request answers the same cluster.

    Args:
        idempotency_key (None | str | Unset):
        body (NewCluster): A cluster to launch. Example: {'image': 'ubuntu-24.04-cuda',
            'locality': 'leaf', 'locality_required': True, 'members': 4, 'name': 'llama', 'project':
            '0a0e0000-0000-4000-8001-000000000001', 'sku': 'h100.8x', 'ssh_public_keys': ['ssh-ed25519
            AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl you@laptop']}.

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Cluster | Problem
     """


    return (await asyncio_detailed(
        client=client,
body=body,
idempotency_key=idempotency_key,

    )).parsed
