"""What the API refused, as exceptions a program can tell apart.

Every refusal is an RFC 9457 problem with a stable ``code``; each code a program acts on
differently has its own class, so ``except NoCapacity`` tries another region while
``except PolicyDenied`` stops.
"""

from __future__ import annotations


class ApiError(Exception):
    """A refusal (4xx) or a fault (5xx), with the problem's fields."""

    def __init__(
        self,
        status: int,
        code: str,
        detail: str,
        field: str | None = None,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.field = field
        self.request_id = request_id


class Invalid(ApiError):
    """400: the input breaks a rule; ``field`` names the input."""


class Unauthenticated(ApiError):
    """401: no token, or one that is unknown, revoked, expired or whose maker left."""


class Forbidden(ApiError):
    """403: the token lacks the scope."""


class PolicyDenied(ApiError):
    """403: a policy, quota or budget of the organization or project refused. Don't retry."""


class NotFound(ApiError):
    """404: no such thing, or not one this token reaches."""


class NoCapacity(ApiError):
    """409 ``sku_unavailable``: nothing fits now; try another region or type."""


class Conflict(ApiError):
    """409: a name in use, an idempotency key used for another request, a volume in use."""


class RateLimited(ApiError):
    """429, after the client's own retries ran out."""


class Unavailable(ApiError):
    """503: the service is briefly away (after the client's retries for safe calls)."""


class ServerError(ApiError):
    """500: the service's fault; quote ``request_id``."""


class Timeout(Exception):
    """A wait ran out before the thing reached the state waited for."""


class Failed(Exception):
    """A launch ended without running (its ``failure`` says why)."""


_BY_CODE = {
    "sku_unavailable": NoCapacity,
    "policy_denied": PolicyDenied,
    "quota_exceeded": PolicyDenied,
    "budget_exceeded": PolicyDenied,
    "rate_limited": RateLimited,
}
_BY_STATUS = {
    400: Invalid,
    401: Unauthenticated,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: RateLimited,
    503: Unavailable,
}


def from_response(status: int, body: object) -> ApiError:
    """The exception for a refused response, from its problem document when it has one."""
    problem = body if isinstance(body, dict) else {}
    code = str(problem.get("code") or f"http_{status}")
    detail = str(problem.get("detail") or problem.get("title") or f"HTTP {status}")
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (
        ServerError if status >= 500 else ApiError
    )
    return cls(
        status,
        code,
        detail,
        field=problem.get("field"),
        request_id=problem.get("request_id"),
    )
