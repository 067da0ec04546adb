from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.offer_list import OfferList
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    region: str | Unset = UNSET,
    gpu_model: str | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["region"] = region

    params["gpu_model"] = gpu_model


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/offers",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> OfferList | Problem | None:
    if response.status_code == 200:
        response_200 = OfferList.from_dict(response.json())



        return response_200

    if response.status_code == 400:
        response_400 = Problem.from_dict(response.json())



        return response_400

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())



        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[OfferList | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient | Client,
    region: str | Unset = UNSET,
    gpu_model: str | Unset = UNSET,

) -> Response[OfferList | Problem]:
    """ Offers: each SKU in each of its regions.

    Args:
        region (str | Unset):
        gpu_model (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[OfferList | Problem]
     """


    kwargs = _get_kwargs(
        region=region,
gpu_model=gpu_model,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient | Client,
    region: str | Unset = UNSET,
    gpu_model: str | Unset = UNSET,

) -> OfferList | Problem | None:
    """ Offers: each SKU in each of its regions.

    Args:
        region (str | Unset):
        gpu_model (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        OfferList | Problem
     """


    return sync_detailed(
        client=client,
region=region,
gpu_model=gpu_model,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient | Client,
    region: str | Unset = UNSET,
    gpu_model: str | Unset = UNSET,

) -> Response[OfferList | Problem]:
    """ Offers: each SKU in each of its regions.

    Args:
        region (str | Unset):
        gpu_model (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[OfferList | Problem]
     """


    kwargs = _get_kwargs(
        region=region,
gpu_model=gpu_model,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient | Client,
    region: str | Unset = UNSET,
    gpu_model: str | Unset = UNSET,

) -> OfferList | Problem | None:
    """ Offers: each SKU in each of its regions.

    Args:
        region (str | Unset):
        gpu_model (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        OfferList | Problem
     """


    return (await asyncio_detailed(
        client=client,
region=region,
gpu_model=gpu_model,

    )).parsed
