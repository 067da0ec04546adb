"""GPUaaS API client for the provisioner and the catalog.

A deployment of the GPUaaS portal serves its REST API under ``/api/v1``; this
module speaks the few calls a SkyPilot provider needs, with ``requests`` (a
SkyPilot dependency already), the way ``lambda_utils`` does for Lambda.

Credentials live in ``~/.gpuaas/config`` (made by the portal's *Account → API
tokens* page; see ``integrations/skypilot/README.md``)::

    api = https://portal.example/api/v1
    token = gpk_...
    project = 0a0e0000-0000-4000-8001-000000000001

``project`` may be left out when the token reaches a single project.
"""
import os
import time
from typing import Any, Dict, Iterator, List, Optional

import requests

CREDENTIAL_FILE = '~/.gpuaas/config'

# Calls are retried on 429 (after ``Retry-After``) and on 503, which the
# portal answers while its database fails over; both are safe to repeat for
# every call here (creates carry an ``Idempotency-Key``).
_MAX_RETRIES = 6
_TIMEOUT_SECONDS = 60


class GpuaasApiError(Exception):
    """A refusal or fault from the API, with its RFC 9457 problem fields."""

    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(f'{status} {code}: {detail}')
        self.status = status
        self.code = code
        self.detail = detail


class NoCapacityError(GpuaasApiError):
    """``sku_unavailable``: nothing fits in this region now. Try elsewhere."""


class PolicyRefusedError(GpuaasApiError):
    """A policy, quota or budget refused: the same anywhere on this cloud."""


class CredentialsError(GpuaasApiError):
    """The token is missing, unknown, revoked, expired, or lacks a scope."""


_POLICY_CODES = ('policy_denied', 'quota_exceeded', 'budget_exceeded')


def _error(response: requests.Response) -> GpuaasApiError:
    try:
        problem = response.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = str(problem.get('code') or f'http_{response.status_code}')
    detail = str(
        problem.get('detail') or problem.get('title') or response.reason)
    if code == 'sku_unavailable':
        cls: type = NoCapacityError
    elif code in _POLICY_CODES:
        cls = PolicyRefusedError
    elif response.status_code in (401, 403):
        cls = CredentialsError
    else:
        cls = GpuaasApiError
    return cls(response.status_code, code, detail)


def read_credentials(path: str = CREDENTIAL_FILE) -> Dict[str, str]:
    """The ``key = value`` lines of the credential file."""
    out: Dict[str, str] = {}
    with open(os.path.expanduser(path), 'r', encoding='utf-8') as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith('#'):
                continue
            key, sep, value = line.partition('=')
            if not sep:
                raise ValueError(f'{path}: {line!r} is not `key = value`')
            out[key.strip()] = value.strip()
    for key in ('api', 'token'):
        if not out.get(key):
            raise ValueError(f'{path} has no `{key} = ...` line')
    return out


class GpuaasClient:
    """One deployment's API, as one token."""

    def __init__(self, api: str, token: Optional[str],
                 project: Optional[str]) -> None:
        self.api = api.rstrip('/')
        self.project = project or None
        self._session = requests.Session()
        if token:
            self._session.headers['Authorization'] = f'Bearer {token}'

    @classmethod
    def from_credentials(cls) -> 'GpuaasClient':
        creds = read_credentials()
        return cls(creds['api'], creds['token'], creds.get('project'))

    def _call(self,
              method: str,
              path: str,
              *,
              params: Optional[Dict[str, Any]] = None,
              json: Optional[Dict[str, Any]] = None,
              headers: Optional[Dict[str, str]] = None) -> Any:
        for attempt in range(_MAX_RETRIES + 1):
            response = self._session.request(method,
                                             f'{self.api}{path}',
                                             params=params,
                                             json=json,
                                             headers=headers,
                                             timeout=_TIMEOUT_SECONDS)
            if response.status_code in (429, 503) and attempt < _MAX_RETRIES:
                time.sleep(_retry_after(response, attempt))
                continue
            if response.status_code >= 400:
                raise _error(response)
            if response.status_code == 204 or not response.content:
                return None
            return response.json()
        raise AssertionError('unreachable')

    # The catalog (public).

    def offers(self) -> List[Dict[str, Any]]:
        return self._call('GET', '/offers')['offers']

    # What the token reaches.

    def projects(self) -> List[Dict[str, Any]]:
        return self._call('GET', '/projects')['projects']

    def images(self) -> List[Dict[str, Any]]:
        params = {'project': self.project} if self.project else None
        return self._call('GET', '/images', params=params)['images']

    # Instances.

    def instances(self, tag: str) -> Iterator[Dict[str, Any]]:
        """Every instance with the tag (``key=value``), released ones too."""
        params: Dict[str, Any] = {'tag': tag, 'limit': 100}
        if self.project:
            params['project'] = self.project
        while True:
            page = self._call('GET', '/instances', params=params)
            yield from page['instances']
            cursor = page.get('next_cursor')
            if not cursor:
                return
            params['cursor'] = cursor

    def instance(self, instance_id: str) -> Dict[str, Any]:
        return self._call('GET', f'/instances/{instance_id}')

    def launch(self, body: Dict[str, Any],
               idempotency_key: str) -> Dict[str, Any]:
        if self.project:
            body = dict(body, project=self.project)
        return self._call('POST',
                          '/instances',
                          json=body,
                          headers={'Idempotency-Key': idempotency_key})

    def release(self, instance_id: str) -> None:
        """Idempotent: releasing a released instance answers the same."""
        self._call('DELETE', f'/instances/{instance_id}')

    def stop(self, instance_id: str) -> Dict[str, Any]:
        """Idempotent: the disk is kept, the GPUs released."""
        return self._call('POST', f'/instances/{instance_id}/stop')

    def start(self, instance_id: str) -> Dict[str, Any]:
        """Idempotent: a stopped instance is placed again, on its disk."""
        return self._call('POST', f'/instances/{instance_id}/start')


def _retry_after(response: requests.Response, attempt: int) -> float:
    try:
        return min(float(response.headers.get('Retry-After', '')), 30.0)
    except ValueError:
        return min(0.5 * 2**attempt, 10.0)
