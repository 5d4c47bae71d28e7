"""The sidecar's HTTP API as plain request descriptions, shared by the sync and async clients.

Each function returns a ``Call``; ``Client`` and ``AsyncClient`` send it and hand the answer to
``answer``, which returns the JSON body or raises the problem as an exception.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union
from urllib.parse import quote

from .errors import InvalidArgument, SidecarUnreachable, from_problem

# Time on top of a long poll's own timeout for the sidecar to answer it (its request_timeout
# bounds each store call, 5 s by default).
LONG_POLL_MARGIN = 10.0

Json = Dict[str, Any]


@dataclass(frozen=True)
class Call:
    """One request: ``accept`` lists the statuses that are an answer, not an error."""

    method: str
    path: str
    body: Optional[Json] = None
    timeout: Optional[float] = None
    accept: Tuple[int, ...] = (200,)


def seg(text: str) -> str:
    """``text`` as one path segment (every reserved character escaped)."""
    return quote(text, safe="")


def ms(seconds: float, what: str) -> int:
    """Seconds as whole milliseconds; a negative time is refused before any request."""
    if seconds < 0:
        raise InvalidArgument(f"{what} must not be negative, got {seconds}", field=what)
    return int(round(seconds * 1000))


def _put(body: Json, **fields: Any) -> Json:
    """``body`` with the fields that are not ``None``."""
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def acquire(
    name: str,
    *,
    permits: int,
    timeout: float,
    ttl: Optional[float],
    capacity: Optional[int],
    owner: Optional[str],
    flow: Optional[str],
    class_: Optional[str],
    weight: Optional[int],
) -> Call:
    body = _put(
        {"permits": permits, "timeout_ms": ms(timeout, "timeout")},
        ttl_ms=None if ttl is None else ms(ttl, "ttl"),
        capacity=capacity,
        owner=owner,
        flow=flow,
        weight=weight,
    )
    _put(body, **{"class": class_})
    return Call(
        "POST", f"/v1/semaphores/{seg(name)}/permits", body, timeout + LONG_POLL_MARGIN, (201,)
    )


def keepalive(permit_id: str, timeout: float) -> Call:
    return Call("POST", f"/v1/permits/{seg(permit_id)}/keepalive", timeout=timeout)


def release(permit_id: str, outcome: Optional[str], latency_ms: Optional[float]) -> Call:
    body = _put({}, outcome=outcome, latency_ms=latency_ms) or None
    return Call("DELETE", f"/v1/permits/{seg(permit_id)}", body, accept=(204,))


def shrink(permit_id: str, permits: int) -> Call:
    return Call("POST", f"/v1/permits/{seg(permit_id)}/shrink", {"permits": permits})


def status(name: str) -> Call:
    return Call("GET", f"/v1/semaphores/{seg(name)}")


def set_capacity(name: str, capacity: int) -> Call:
    return Call("PUT", f"/v1/semaphores/{seg(name)}", {"capacity": capacity})


def set_quota(
    name: str,
    *,
    limit: int,
    period: Union[str, float],
    burst: Optional[int],
    algorithm: Optional[str],
    ban: Optional[Union[str, float]],
) -> Call:
    body: Json = {"limit": limit}
    if isinstance(period, str):
        body["period"] = period
    else:
        body["period_ms"] = ms(period, "period")
    if isinstance(ban, str):
        body["ban"] = ban
    elif ban is not None:
        body["ban_ms"] = ms(ban, "ban")
    _put(body, burst=burst, algorithm=algorithm)
    return Call("PUT", f"/v1/ratelimits/{seg(name)}", body)


def _rate_body(key: str, class_: Optional[str], flow: Optional[str], **more: Any) -> Json:
    body = _put({"key": key}, flow=flow, **more)
    return _put(body, **{"class": class_})


def check(name: str, key: str, cost: int, class_: Optional[str], flow: Optional[str]) -> Call:
    body = _rate_body(key, class_, flow, cost=cost)
    return Call("POST", f"/v1/ratelimits/{seg(name)}/check", body, accept=(200, 429))


def wait(
    name: str, key: str, cost: int, timeout: float, class_: Optional[str], flow: Optional[str]
) -> Call:
    body = _rate_body(key, class_, flow, cost=cost, timeout_ms=ms(timeout, "timeout"))
    path = f"/v1/ratelimits/{seg(name)}/wait"
    return Call("POST", path, body, timeout + LONG_POLL_MARGIN)


def reserve(
    name: str,
    key: str,
    estimate: int,
    class_: Optional[str],
    flow: Optional[str],
    timeout: Optional[float],
    settle_within: Optional[float],
) -> Call:
    body = _rate_body(
        key,
        class_,
        flow,
        estimate=estimate,
        timeout_ms=None if timeout is None else ms(timeout, "timeout"),
        settle_within_ms=None if settle_within is None else ms(settle_within, "settle_within"),
    )
    return Call("POST", f"/v1/ratelimits/{seg(name)}/reservations", body, accept=(201,))


def settle(name: str, reservation_id: str, actual: int) -> Call:
    path = f"/v1/ratelimits/{seg(name)}/reservations/{seg(reservation_id)}/settle"
    return Call("POST", path, {"actual": actual})


def keep(name: str, reservation_id: str) -> Call:
    return Call("DELETE", f"/v1/ratelimits/{seg(name)}/reservations/{seg(reservation_id)}")


def charge(name: str, key: str, cost: int) -> Call:
    return Call("POST", f"/v1/ratelimits/{seg(name)}/charge", {"key": key, "cost": cost})


def refund(name: str, key: str, amount: int) -> Call:
    return Call("POST", f"/v1/ratelimits/{seg(name)}/refund", {"key": key, "amount": amount})


def balance(name: str, key: str) -> Call:
    return Call("GET", f"/v1/ratelimits/{seg(name)}/balances/{seg(key)}")


def _retry_after(headers: Mapping[str, str]) -> Optional[float]:
    value = headers.get("retry-after")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _parse(content: bytes) -> Json:
    if not content:
        return {}
    try:
        body = json.loads(content)
    except ValueError:
        return {"detail": content.decode("utf-8", errors="replace").strip()}
    return body if isinstance(body, dict) else {"value": body}


def answer(call: Call, status: int, headers: Mapping[str, str], content: bytes) -> Json:
    """The JSON body of an accepted answer (``{}`` when empty); raises the problem otherwise."""
    body = _parse(content)
    if status in call.accept:
        return body
    raise from_problem(status, body, _retry_after(headers))


def unreachable(base_url: str, call: Call, err: Exception, kind: str) -> SidecarUnreachable:
    """The error for a request the sidecar at ``base_url`` never answered; ``kind`` is
    ``connect`` (nothing listens there, or the name does not resolve), ``timeout`` or
    ``transport`` (the connection broke)."""
    why = str(err) or type(err).__name__
    hint = {
        "connect": "is `clusterlimit serve` running there?",
        "timeout": "no answer in time; the request may or may not have been applied",
        "transport": "the connection broke; the request may or may not have been applied",
    }.get(kind, "")
    return SidecarUnreachable(
        f"cannot reach the clusterlimit sidecar at {base_url} ({call.method} {call.path}): "
        f"{why}; {hint}",
        refused=kind == "connect",
    )
