import time
from typing import Any, Dict, List, Optional

import requests

from dstack._internal.core.errors import BackendAuthError, BackendError, NoCapacityError

# 429 and 503 (the portal answers 503 while its database fails over) are retried: every call
# here is safe to repeat, creates because they carry an Idempotency-Key.
_MAX_RETRIES = 6
_TIMEOUT_SECONDS = 60


class GpuaasRefusal(BackendError):
    """A refusal from the API that is not about capacity (policy, quota, budget, input)."""

    def __init__(self, status: int, code: str, detail: str):
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code


class GpuaasAPIClient:
    def __init__(self, api_url: str, token: str, project: Optional[str] = None):
        self.api_url = api_url.rstrip("/")
        self.project = project
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def validate_token(self) -> bool:
        try:
            projects = self.projects()
        except BackendAuthError:
            return False
        if self.project is None:
            return len(projects) == 1
        return any(p["id"] == self.project for p in projects)

    def projects(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/projects")["projects"]

    def offers(self) -> List[Dict[str, Any]]:
        return self._call("GET", "/offers")["offers"]

    def images(self) -> List[Dict[str, Any]]:
        params = {"project": self.project} if self.project else None
        return self._call("GET", "/images", params=params)["images"]

    def launch(self, body: Dict[str, Any], idempotency_key: str) -> Dict[str, Any]:
        if self.project:
            body = dict(body, project=self.project)
        return self._call(
            "POST", "/instances", json=body, headers={"Idempotency-Key": idempotency_key}
        )

    def instance(self, instance_id: str) -> Dict[str, Any]:
        return self._call("GET", f"/instances/{instance_id}")

    def release(self, instance_id: str) -> None:
        self._call("DELETE", f"/instances/{instance_id}")

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        for attempt in range(_MAX_RETRIES + 1):
            resp = self.session.request(
                method, f"{self.api_url}{path}", timeout=_TIMEOUT_SECONDS, **kwargs
            )
            if resp.status_code in (429, 503) and attempt < _MAX_RETRIES:
                time.sleep(_retry_after(resp, attempt))
                continue
            if resp.status_code >= 400:
                raise _error(resp)
            return resp.json() if resp.content else None
        raise AssertionError("unreachable")


def _error(resp: requests.Response) -> BackendError:
    try:
        problem = resp.json()
    except ValueError:
        problem = {}
    if not isinstance(problem, dict):
        problem = {}
    code = str(problem.get("code") or f"http_{resp.status_code}")
    detail = str(problem.get("detail") or problem.get("title") or resp.reason)
    if code == "sku_unavailable":
        return NoCapacityError(detail)
    if resp.status_code == 401 or code == "forbidden":
        return BackendAuthError(f"{resp.status_code} {code}: {detail}")
    return GpuaasRefusal(resp.status_code, code, detail)


def _retry_after(resp: requests.Response, attempt: int) -> float:
    try:
        return min(float(resp.headers.get("Retry-After", "")), 30.0)
    except ValueError:
        return min(0.5 * 2**attempt, 10.0)
