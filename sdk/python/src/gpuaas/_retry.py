"""Retries below the generated client, where every call passes."""

from __future__ import annotations

import random
import threading
import time

import httpx

# The longest wait one retry honours, whatever `Retry-After` asks.
MAX_WAIT_S = 30.0


class RetryingTransport(httpx.HTTPTransport):
    """Sends a request again after a 429, and after a 503 or a dropped connection when the
    request is safe to repeat: a GET, HEAD or DELETE (a release or delete answers the same
    twice), or one that carries an ``Idempotency-Key``. It waits what ``Retry-After`` says
    (or a second, growing), at most ``max_retries`` times."""

    def __init__(self, max_retries: int = 5, **kwargs) -> None:
        super().__init__(**kwargs)
        self.max_retries = max_retries
        self._lock = threading.Lock()
        self.retries = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        safe = request.method in ("GET", "HEAD", "DELETE") or "idempotency-key" in request.headers
        attempt = 0
        while True:
            try:
                response = super().handle_request(request)
            except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError):
                if not safe or attempt >= self.max_retries:
                    raise
                self._wait(None, attempt)
                attempt += 1
                continue
            again = response.status_code == 429 or (response.status_code == 503 and safe)
            if not again or attempt >= self.max_retries:
                return response
            retry_after = response.headers.get("retry-after")
            response.read()
            response.close()
            self._wait(retry_after, attempt)
            attempt += 1

    def _wait(self, retry_after: str | None, attempt: int) -> None:
        with self._lock:
            self.retries += 1
        try:
            wait = float(retry_after) if retry_after is not None else None
        except ValueError:
            wait = None
        if wait is None:
            wait = min(2.0**attempt, 8.0)
        time.sleep(min(wait, MAX_WAIT_S) + random.uniform(0, 0.25))
