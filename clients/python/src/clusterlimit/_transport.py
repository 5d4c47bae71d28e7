"""Sending a ``Call`` with httpx: the sync transport (the async one is in ``aio``)."""

from __future__ import annotations

import os
import socket
from typing import Dict, Optional

import httpx

from . import _wire
from ._wire import Call, Json

# Connecting to a sidecar on the same host takes well under a millisecond: past this it is
# not coming (a long poll's own timeout covers only the answer).
CONNECT_TIMEOUT = 5.0


def default_owner() -> str:
    """The owner label shown in the semaphore's status: this host and process."""
    return f"{socket.gethostname()}/{os.getpid()}"[:128]


def headers(token: Optional[str]) -> Dict[str, str]:
    """The headers of every request: the bearer token, if the sidecar wants one."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def timeout(call: Call, default: float) -> httpx.Timeout:
    """The call's own timeout (long polls) or the client's, with a short connect timeout."""
    total = call.timeout if call.timeout is not None else default
    return httpx.Timeout(total, connect=min(CONNECT_TIMEOUT, total))


def failure_kind(err: httpx.TransportError) -> str:
    """``connect``, ``timeout`` or ``transport``: see ``_wire.unreachable``."""
    if isinstance(err, httpx.ConnectError):
        return "connect"
    if isinstance(err, httpx.TimeoutException):
        return "timeout"
    return "transport"


class SyncTransport:
    """One sidecar, one connection pool (safe to share between threads)."""

    def __init__(
        self,
        base_url: str,
        token: Optional[str],
        default_timeout: float,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = headers(token)
        self.default_timeout = default_timeout
        self.http = httpx.Client(base_url=self.base_url, headers=self.headers)

    def send(self, call: Call) -> Json:
        """Sends ``call``; its JSON answer, or the problem raised as an exception."""
        return self._send(self.http, call, timeout(call, self.default_timeout))

    def send_alone(self, call: Call, seconds: float) -> Json:
        """Sends ``call`` on a connection of its own (from a signal handler, which may have
        interrupted this thread inside the pool)."""
        with httpx.Client(base_url=self.base_url, headers=self.headers) as http:
            return self._send(http, call, httpx.Timeout(seconds))

    def _send(self, http: httpx.Client, call: Call, limit: httpx.Timeout) -> Json:
        try:
            r = http.request(call.method, call.path, json=call.body, timeout=limit)
        except httpx.TransportError as err:
            raise _wire.unreachable(self.base_url, call, err, failure_kind(err)) from err
        return _wire.answer(call, r.status_code, r.headers, r.content)

    def close(self) -> None:
        self.http.close()
