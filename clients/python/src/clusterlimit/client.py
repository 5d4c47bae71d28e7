"""``Client``: the sync API of the sidecar."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Dict, Optional, Type, Union

from . import _wire
from ._transport import SyncTransport, default_owner
from .models import Balance, Decision, Grant, Reserved
from .permit import Permit
from .reservation import Reservation

DEFAULT_URL = "http://127.0.0.1:7878"


class Client:
    """A client of one sidecar (``clusterlimit serve``), safe to share between threads.

    ``token`` is the sidecar's bearer token (``serve --token-file``); ``timeout`` bounds each
    request that is not a long poll (seconds). ``handle_sigterm`` installs, at the first
    permit taken on the main thread, a SIGTERM handler that releases held permits and then
    chains to the previous handler (see ``install_sigterm_handler``).
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        token: Optional[str] = None,
        timeout: float = 10.0,
        owner: Optional[str] = None,
        handle_sigterm: bool = True,
    ) -> None:
        self.url = url.rstrip("/")
        self.owner = owner or default_owner()
        self.handle_sigterm = handle_sigterm
        self._t = SyncTransport(self.url, token, timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def close(self) -> None:
        """Closes the connections (held permits are not released: release them first)."""
        self._t.close()

    # --- semaphores -------------------------------------------------------------------

    def permit(
        self,
        name: str,
        *,
        permits: int = 1,
        timeout: float = 30.0,
        capacity: Optional[int] = None,
        ttl: Optional[float] = None,
        owner: Optional[str] = None,
        flow: Optional[str] = None,
        class_: Optional[str] = None,
        weight: Optional[int] = None,
    ) -> Permit:
        """Takes ``permits`` of semaphore ``name``, waiting up to ``timeout`` seconds (FIFO).

        ``capacity`` creates the semaphore if absent (another capacity than its own is a
        ``Conflict``); ``ttl`` is the client TTL in seconds (the sidecar's ``permit_ttl`` if
        ``None``). Raises ``AcquireTimeout`` when no permit came in time.
        """
        call = _wire.acquire(
            name,
            permits=permits,
            timeout=timeout,
            ttl=ttl,
            capacity=capacity,
            owner=owner or self.owner,
            flow=flow,
            class_=class_,
            weight=weight,
        )
        grant = Grant.from_json(self._t.send(call))
        return Permit(self._t, grant, self.handle_sigterm)

    def status(self, name: str) -> Dict[str, Any]:
        """The semaphore's status: capacity, used, holders, waiters."""
        return self._t.send(_wire.status(name))

    def set_capacity(self, name: str, capacity: int) -> Dict[str, Any]:
        """Sets (or creates with) ``capacity``; the new status."""
        return self._t.send(_wire.set_capacity(name, capacity))

    # --- rate limits ------------------------------------------------------------------

    def set_quota(
        self,
        name: str,
        *,
        limit: int,
        period: Union[str, float],
        burst: Optional[int] = None,
        algorithm: Optional[str] = None,
        ban: Optional[Union[str, float]] = None,
    ) -> Dict[str, Any]:
        """Creates the limit or changes its quota for every client: ``limit`` per ``period``
        (``"1m"`` or seconds); ``algorithm`` is ``gcra`` (default), ``sliding_window`` or
        ``fixed_window``. The quota as stored."""
        call = _wire.set_quota(
            name, limit=limit, period=period, burst=burst, algorithm=algorithm, ban=ban
        )
        return self._t.send(call)

    def check(
        self,
        name: str,
        key: str,
        cost: int = 1,
        *,
        class_: Optional[str] = None,
        flow: Optional[str] = None,
    ) -> Decision:
        """Asks whether ``key`` may spend ``cost`` now: admitted (consumed) or denied (nothing
        consumed). A denial is an answer, not an error: ``decision.allowed`` is false."""
        return Decision.from_json(self._t.send(_wire.check(name, key, cost, class_, flow)))

    def wait(
        self,
        name: str,
        key: str,
        cost: int = 1,
        *,
        timeout: float = 30.0,
        class_: Optional[str] = None,
        flow: Optional[str] = None,
    ) -> Decision:
        """Waits until ``key`` may spend ``cost``, at most ``timeout`` seconds; raises
        ``OverLimit`` (nothing consumed) when the next chance is past the timeout."""
        call = _wire.wait(name, key, cost, timeout, class_, flow)
        return Decision.from_json(self._t.send(call))

    def reserve(
        self,
        name: str,
        key: str,
        estimate: int,
        *,
        class_: Optional[str] = None,
        flow: Optional[str] = None,
        timeout: Optional[float] = None,
        settle_within: Optional[float] = None,
    ) -> Reservation:
        """Takes ``estimate`` now, to be settled at the real cost: raises ``OverLimit`` if
        denied (nothing taken). ``settle_within`` (seconds) is its time limit."""
        call = _wire.reserve(name, key, estimate, class_, flow, timeout, settle_within)
        return Reservation(self._t, Reserved.from_json(self._t.send(call)))

    def charge(self, name: str, key: str, cost: int) -> Balance:
        """Charges ``cost`` whatever the key holds, into debt past it."""
        return Balance.from_json(self._t.send(_wire.charge(name, key, cost)))

    def refund(self, name: str, key: str, amount: int) -> Balance:
        """Gives ``amount`` back (the debt first, never past a full key)."""
        return Balance.from_json(self._t.send(_wire.refund(name, key, amount)))

    def balance(self, name: str, key: str) -> Balance:
        """The key's balance now (nothing taken)."""
        return Balance.from_json(self._t.send(_wire.balance(name, key)))
