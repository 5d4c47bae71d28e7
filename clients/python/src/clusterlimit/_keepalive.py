"""When a failed keepalive means the permit is lost (shared by the thread and the task)."""

from __future__ import annotations

from typing import Optional

from .errors import ClusterlimitError, Gone, NotFound, SidecarUnreachable

# Keepalives per client TTL: two may fail in a row and the permit still lives.
PER_TTL = 3


def interval(ttl_ms: int) -> float:
    """Seconds between keepalives for a permit whose client TTL is ``ttl_ms``."""
    return max(ttl_ms / 1000.0 / PER_TTL, 0.05)


def lost_reason(err: ClusterlimitError, since_ok: float, ttl_ms: int) -> Optional[str]:
    """Why the permit is lost after ``err``, or ``None`` to try again next interval.

    404 (expired or released) and 410 (lost in the store) are final. A sidecar that refuses
    connections is not running, and its permits went with it. Any other failure is retried
    until a whole client TTL has passed since the last keepalive that landed: by then the
    sidecar has released the permit anyway.
    """
    if isinstance(err, (NotFound, Gone)):
        return f"the sidecar answered the keepalive: {err.detail}"
    if isinstance(err, SidecarUnreachable) and err.refused:
        return f"the sidecar is gone: {err.detail}"
    if since_ok >= ttl_ms / 1000.0:
        return (
            f"no keepalive landed for {since_ok:.1f}s, longer than the permit's TTL "
            f"({ttl_ms} ms), so the sidecar released it; last error: {err}"
        )
    return None
