from http import HTTPStatus
from typing import Any, cast
from urllib.parse import quote

import httpx

from ...client import AuthenticatedClient, Client
from ...types import Response, UNSET
from ... import errors

from ...models.audit_list import AuditList
from ...models.problem import Problem
from ...types import UNSET, Unset
from typing import cast



def _get_kwargs(
    *,
    action: str | Unset = UNSET,
    actor: str | Unset = UNSET,
    resource: str | Unset = UNSET,

) -> dict[str, Any]:
    

    

    params: dict[str, Any] = {}

    params["action"] = action

    params["actor"] = actor

    params["resource"] = resource


    params = {k: v for k, v in params.items() if v is not UNSET and v is not None}


    _kwargs: dict[str, Any] = {
        "method": "get",
        "url": "/audit",
        "params": params,
    }


    return _kwargs



def _parse_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> AuditList | Problem | None:
    if response.status_code == 200:
        response_200 = AuditList.from_dict(response.json())



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

    if response.status_code == 429:
        response_429 = Problem.from_dict(response.json())



        return response_429

    if client.raise_on_unexpected_status:
        raise errors.UnexpectedStatus(response.status_code, response.content)
    else:
        return None


def _build_response(*, client: AuthenticatedClient | Client, response: httpx.Response) -> Response[AuditList | Problem]:
    return Response(
        status_code=HTTPStatus(response.status_code),
        content=response.content,
        headers=response.headers,
        parsed=_parse_response(client=client, response=response),
    )


def sync_detailed(
    *,
    client: AuthenticatedClient,
    action: str | Unset = UNSET,
    actor: str | Unset = UNSET,
    resource: str | Unset = UNSET,

) -> Response[AuditList | Problem]:
    """ The organization's audit log.

     Every change in the organization, newest first (at most 200 per search; narrow it with the
    filters). As on the audit page, only for the organization's admins, through a token for
    the whole organization.

    Args:
        action (str | Unset):
        actor (str | Unset):
        resource (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AuditList | Problem]
     """


    kwargs = _get_kwargs(
        action=action,
actor=actor,
resource=resource,

    )

    response = client.get_httpx_client().request(
        **kwargs,
    )

    return _build_response(client=client, response=response)

def sync(
    *,
    client: AuthenticatedClient,
    action: str | Unset = UNSET,
    actor: str | Unset = UNSET,
    resource: str | Unset = UNSET,

) -> AuditList | Problem | None:
    """ The organization's audit log.

     Every change in the organization, newest first (at most 200 per search; narrow it with the
    filters). As on the audit page, only for the organization's admins, through a token for
    the whole organization.

    Args:
        action (str | Unset):
        actor (str | Unset):
        resource (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AuditList | Problem
     """


    return sync_detailed(
        client=client,
action=action,
actor=actor,
resource=resource,

    ).parsed

async def asyncio_detailed(
    *,
    client: AuthenticatedClient,
    action: str | Unset = UNSET,
    actor: str | Unset = UNSET,
    resource: str | Unset = UNSET,

) -> Response[AuditList | Problem]:
    """ The organization's audit log.

     Every change in the organization, newest first (at most 200 per search; narrow it with the
    filters). As on the audit page, only for the organization's admins, through a token for
    the whole organization.

    Args:
        action (str | Unset):
        actor (str | Unset):
        resource (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        Response[AuditList | Problem]
     """


    kwargs = _get_kwargs(
        action=action,
actor=actor,
resource=resource,

    )

    response = await client.get_async_httpx_client().request(
        **kwargs
    )

    return _build_response(client=client, response=response)

async def asyncio(
    *,
    client: AuthenticatedClient,
    action: str | Unset = UNSET,
    actor: str | Unset = UNSET,
    resource: str | Unset = UNSET,

) -> AuditList | Problem | None:
    """ The organization's audit log.

     Every change in the organization, newest first (at most 200 per search; narrow it with the
    filters). As on the audit page, only for the organization's admins, through a token for
    the whole organization.

    Args:
        action (str | Unset):
        actor (str | Unset):
        resource (str | Unset):

    Raises:
        errors.UnexpectedStatus: If the server returns an undocumented status code and Client.raise_on_unexpected_status is True.
        httpx.TimeoutException: If the request takes longer than Client.timeout.

    Returns:
        AuditList | Problem
     """


    return (await asyncio_detailed(
        client=client,
action=action,
actor=actor,
resource=resource,

    )).parsed
