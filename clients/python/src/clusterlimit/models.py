"""What the sidecar answers, as typed values (the JSON field names are kept)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional


def _int(body: Mapping[str, Any], name: str, default: int = 0) -> int:
    value = body.get(name)
    return int(value) if isinstance(value, (int, float)) else default


def _opt_int(body: Mapping[str, Any], name: str) -> Optional[int]:
    value = body.get(name)
    return int(value) if isinstance(value, (int, float)) else None


@dataclass(frozen=True)
class Grant:
    """A permit as granted: ``POST /v1/semaphores/{name}/permits`` answered 201."""

    id: str
    semaphore: str
    permits: int
    fencing_token: int
    ttl_ms: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Grant":
        return cls(
            id=str(body["id"]),
            semaphore=str(body["semaphore"]),
            permits=_int(body, "permits", 1),
            fencing_token=_int(body, "fencing_token"),
            ttl_ms=_int(body, "ttl_ms", 15000),
        )


@dataclass(frozen=True)
class Decision:
    """A rate-limit decision: admitted (``allowed``, the cost consumed) or denied.

    ``retry_after_ms`` is when a denied check may pass (``None`` when admitted);
    ``source`` says who decided: ``store``, ``fail_open``, ``fail_closed`` or ``local``.
    """

    allowed: bool
    name: str
    key: str
    cost: int
    limit: int
    remaining: int
    retry_after_ms: Optional[int]
    reset_after_ms: int
    source: str
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.allowed

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Decision":
        return cls(
            allowed=bool(body.get("allowed")),
            name=str(body.get("name", "")),
            key=str(body.get("key", "")),
            cost=_int(body, "cost", 1),
            limit=_int(body, "limit"),
            remaining=_int(body, "remaining"),
            retry_after_ms=_opt_int(body, "retry_after_ms"),
            reset_after_ms=_int(body, "reset_after_ms"),
            source=str(body.get("source", "")),
            raw=dict(body),
        )


@dataclass(frozen=True)
class Balance:
    """A key's standing after a settle, charge or refund: ``debt`` above 0 denies its checks
    until time has paid it off (``retry_after_ms``)."""

    name: str
    key: str
    limit: int
    remaining: int
    debt: int
    retry_after_ms: Optional[int]
    reset_after_ms: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Balance":
        return cls(
            name=str(body.get("name", "")),
            key=str(body.get("key", "")),
            limit=_int(body, "limit"),
            remaining=_int(body, "remaining"),
            debt=_int(body, "debt"),
            retry_after_ms=_opt_int(body, "retry_after_ms"),
            reset_after_ms=_int(body, "reset_after_ms"),
        )


@dataclass(frozen=True)
class Reserved:
    """An admitted reservation: the estimate is taken; settle it by ``settle_within_ms``."""

    id: str
    name: str
    key: str
    estimate: int
    limit: int
    remaining: int
    reset_after_ms: int
    settle_within_ms: int

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> "Reserved":
        return cls(
            id=str(body["id"]),
            name=str(body.get("name", "")),
            key=str(body.get("key", "")),
            estimate=_int(body, "estimate"),
            limit=_int(body, "limit"),
            remaining=_int(body, "remaining"),
            reset_after_ms=_int(body, "reset_after_ms"),
            settle_within_ms=_int(body, "settle_within_ms"),
        )
