"""A held permit (sync): kept alive by a thread, released on exit."""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import Optional, Type

from . import _signals, _wire
from ._keepalive import interval, lost_reason
from ._lost import LostFlag
from ._transport import SyncTransport
from .errors import ClusterlimitError, Gone, NotFound
from .models import Grant

log = logging.getLogger("clusterlimit")

# A release sent from the SIGTERM handler waits at most this long.
SIGNAL_RELEASE_TIMEOUT = 2.0


class Permit:
    """A permit of a semaphore, held until released.

    A thread renews its client TTL every TTL/3. ``lost`` becomes true when a keepalive learns
    the permit is gone (stop the guarded work then); ``fencing_token`` grows with every grant
    of the semaphore, for storage that refuses writes from an older holder. As a context
    manager it releases on exit, also when the block raises.
    """

    def __init__(self, transport: SyncTransport, grant: Grant, handle_sigterm: bool) -> None:
        self.id = grant.id
        self.semaphore = grant.semaphore
        self.permits = grant.permits
        self.fencing_token = grant.fencing_token
        self.ttl_ms = grant.ttl_ms
        self.lost = LostFlag()
        self._t = transport
        self._stop = threading.Event()
        self._releasing = False
        self.released = False
        _signals.hold(self, handle_sigterm)
        self._thread = threading.Thread(
            target=self._keep_alive, name=f"clusterlimit keepalive {self.semaphore}", daemon=True
        )
        self._thread.start()

    def __repr__(self) -> str:
        return (
            f"Permit(semaphore={self.semaphore!r}, permits={self.permits}, "
            f"fencing_token={self.fencing_token}, lost={bool(self.lost)})"
        )

    def __enter__(self) -> "Permit":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            self.release()
        except ClusterlimitError as err:
            # The sidecar frees it after its TTL without keepalives; never hide the block's
            # own exception, nor raise for a permit already known to be lost.
            self._stop.set()
            _signals.drop(self)
            if exc is None and not self.lost:
                raise
            log.warning(
                "clusterlimit: releasing permit %s of %s failed: %s", self.id, self.semaphore, err
            )

    def keepalive(self) -> None:
        """Renews the client TTL now (the thread does it anyway); raises ``NotFound`` or
        ``PermitLost`` if the permit is gone, and sets ``lost``."""
        try:
            self._t.send(_wire.keepalive(self.id, interval(self.ttl_ms)))
        except (NotFound, Gone) as err:
            self._mark_lost(f"the sidecar answered the keepalive: {err.detail}")
            raise

    def shrink(self, permits: int) -> None:
        """Lowers the weight held to ``permits``: the weight freed goes to the waiters now."""
        try:
            answer = self._t.send(_wire.shrink(self.id, permits))
        except (NotFound, Gone) as err:
            self._mark_lost(f"the sidecar answered the shrink: {err.detail}")
            raise
        self.permits = int(answer.get("permits", permits))

    def release(self, outcome: Optional[str] = None, latency_ms: Optional[float] = None) -> None:
        """Releases the permit (again: nothing happens). ``outcome`` (``success``,
        ``dropped``, ``ignore``) and ``latency_ms`` feed an adaptive semaphore.

        A permit the sidecar no longer knows (expired, lost) is not an error here: ``lost``
        is set and says why.
        """
        if self.released:
            return
        self._releasing = True
        try:
            self._t.send(_wire.release(self.id, outcome, latency_ms))
        except (NotFound, Gone) as err:
            self.lost._set(f"gone before its release: {err.detail}")
        except BaseException:
            self._releasing = False
            raise
        self._done()

    def _done(self) -> None:
        self.released = True
        self._stop.set()
        _signals.drop(self)

    def _release_on_signal(self) -> None:
        if self.released:
            return
        self._releasing = True
        self._stop.set()
        try:
            self._t.send_alone(_wire.release(self.id, None, None), SIGNAL_RELEASE_TIMEOUT)
        except (NotFound, Gone):
            pass
        self._done()

    def _mark_lost(self, why: str) -> None:
        if self._releasing or self.released:
            return  # a keepalive that crossed the release: not a loss
        if self.lost._set(why):
            log.warning("clusterlimit: permit %s of %s lost: %s", self.id, self.semaphore, why)

    def _keep_alive(self) -> None:
        every = interval(self.ttl_ms)
        last_ok = time.monotonic()
        while not self._stop.wait(every):
            try:
                self._t.send(_wire.keepalive(self.id, every))
                last_ok = time.monotonic()
            except ClusterlimitError as err:
                why = lost_reason(err, time.monotonic() - last_ok, self.ttl_ms)
                if why is not None:
                    self._mark_lost(why)
                    return
            except Exception as err:  # never let the thread die silently
                self._mark_lost(f"the keepalive failed: {err}")
                return
