"""Errors of the sidecar, one exception class per kind of problem.

The sidecar answers errors as RFC 9457 ``application/problem+json``. Its ``type`` is
``about:blank`` for every problem; the stable reason is the body's ``code``
(``invalid_field``, ``timeout``, ``permit_lost``, ...), so the classes below are chosen by
``code`` first and by HTTP status for a code this client does not know.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

__all__ = [
    "ClusterlimitError",
    "InvalidArgument",
    "Unauthorized",
    "NotFound",
    "Conflict",
    "Gone",
    "PermitLost",
    "OverLimit",
    "AcquireTimeout",
    "Unavailable",
    "SidecarUnreachable",
]


class ClusterlimitError(Exception):
    """A request the sidecar refused or could not serve.

    ``type``, ``status``, ``detail``, ``code`` and ``field`` are the problem body's fields
    (``status`` is ``None`` when the sidecar never answered); ``body`` is the whole body and
    ``retry_after`` the ``Retry-After`` header in seconds, if any.
    """

    def __init__(
        self,
        detail: str,
        *,
        status: Optional[int] = None,
        code: str = "",
        type: str = "about:blank",
        field: Optional[str] = None,
        retry_after: Optional[float] = None,
        body: Optional[Mapping[str, Any]] = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code
        self.type = type
        self.field = field
        self.retry_after = retry_after
        self.body: Dict[str, Any] = dict(body or {})

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        if self.status is None:
            return f"{self.detail}{where}"
        return f"{self.detail}{where} [HTTP {self.status} {self.code}]"


class InvalidArgument(ClusterlimitError):
    """400/413: the request was refused as it is; ``field`` names what is wrong."""


class Unauthorized(ClusterlimitError):
    """401: no bearer token, or a wrong one (``Client(..., token=...)``)."""


class NotFound(ClusterlimitError):
    """404: no such semaphore, limit, permit or reservation (never made, released, expired)."""


class Conflict(ClusterlimitError):
    """409: another capacity than the semaphore's, or a reservation settled before."""


class Gone(ClusterlimitError):
    """410: the thing existed but is no more (a lost permit, an expired reservation)."""


class PermitLost(Gone):
    """410 ``permit_lost``: the store lost the permit; stop the work it guards."""


class OverLimit(ClusterlimitError):
    """429: a rate limit denies it now (``retry_after`` says when to try again)."""


class AcquireTimeout(OverLimit):
    """429 ``timeout``/``no_permits``: no permit was free within the acquire's timeout."""


class Unavailable(ClusterlimitError):
    """503: the store does not answer, the session was lost, or the sidecar is stopping."""


class SidecarUnreachable(Unavailable):
    """The sidecar did not answer at all (not running, wrong address, timed out).

    ``refused`` is true when no connection could be made (nothing listens at the address):
    a sidecar that is not running holds no permit any more.
    """

    def __init__(self, detail: str, *, refused: bool = False) -> None:
        super().__init__(detail, code="unreachable")
        self.refused = refused


_BY_CODE: Dict[str, Type[ClusterlimitError]] = {
    "permit_lost": PermitLost,
    "timeout": AcquireTimeout,
    "no_permits": AcquireTimeout,
    "rate_limited": OverLimit,
}

_BY_STATUS: Dict[int, Type[ClusterlimitError]] = {
    400: InvalidArgument,
    401: Unauthorized,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: InvalidArgument,
    429: OverLimit,
    503: Unavailable,
}


def error_class(status: int, code: str) -> Type[ClusterlimitError]:
    """The exception class for a problem with ``status`` and ``code``."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status) or ClusterlimitError


def from_problem(
    status: int, body: Mapping[str, Any], retry_after: Optional[float]
) -> ClusterlimitError:
    """The exception for a problem body (or any error body) answered with ``status``."""
    code = str(body.get("code") or "")
    detail = str(body.get("detail") or body.get("title") or f"the sidecar answered {status}")
    field = body.get("field")
    cls = error_class(status, code)
    return cls(
        detail,
        status=status,
        code=code,
        type=str(body.get("type") or "about:blank"),
        field=str(field) if field is not None else None,
        retry_after=retry_after,
        body=body,
    )
