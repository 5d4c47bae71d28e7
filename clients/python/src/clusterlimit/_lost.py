"""The ``lost`` flag of a permit: true once the permit is gone, with the reason why."""

from __future__ import annotations

import threading
from typing import Optional


class LostFlag:
    """Set when a keepalive learns that the permit is gone (lost in the store, expired, or the
    sidecar stopped): the guarded work is no longer exclusive and should stop.

    Reads as a bool (``if permit.lost: ...``) and waits like a ``threading.Event``.
    """

    def __init__(self) -> None:
        self._event = threading.Event()
        self.reason: Optional[str] = None

    def __bool__(self) -> bool:
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"LostFlag({self.reason!r})" if self else "LostFlag(False)"

    def is_set(self) -> bool:
        """True once the permit is lost."""
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Blocks until the permit is lost or ``timeout`` seconds pass; true if lost."""
        return self._event.wait(timeout)

    def _set(self, reason: str) -> bool:
        """Marks the permit lost (the first reason stays); true if this call set it."""
        if self._event.is_set():
            return False
        self.reason = reason
        self._event.set()
        return True
