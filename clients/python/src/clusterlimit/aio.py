"""``AsyncClient``: the asyncio API of the sidecar, the same calls as ``Client`` awaited.

A permit's keepalive is a task of the event loop; ``permit()`` and ``reserve()`` are awaited
for the object, or entered with ``async with`` to release (keep) it on exit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from types import TracebackType
from typing import (
    Any,
    Awaitable,
    Callable,
    Dict,
    Generator,
    Generic,
    Optional,
    Type,
    TypeVar,
    Union,
)

import httpx

from . import _signals, _wire
from ._keepalive import interval, lost_reason
from ._lost import LostFlag
from ._transport import default_owner, failure_kind, headers, timeout
from ._wire import Call, Json
from .client import DEFAULT_URL
from .errors import ClusterlimitError, Gone, NotFound
from .models import Balance, Decision, Grant, Reserved
from .permit import SIGNAL_RELEASE_TIMEOUT

log = logging.getLogger("clusterlimit")

T = TypeVar("T", bound="_AsyncExit")


class _AsyncExit:
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        raise NotImplementedError


class Pending(Generic[T]):
    """A request not sent yet: ``await`` it for the object, or ``async with`` it to also end
    the object (release the permit, keep the reservation) on exit."""

    def __init__(self, start: Callable[[], Awaitable[T]]) -> None:
        self._start = start
        self._value: Optional[T] = None

    def __await__(self) -> Generator[Any, None, T]:
        return self._start().__await__()

    async def __aenter__(self) -> T:
        self._value = await self._start()
        return self._value

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._value is not None:
            await self._value.__aexit__(exc_type, exc, tb)


class AsyncTransport:
    """One sidecar, one async connection pool (one event loop)."""

    def __init__(self, base_url: str, token: Optional[str], default_timeout: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = headers(token)
        self.default_timeout = default_timeout
        self.http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers)

    async def send(self, call: Call) -> Json:
        """Sends ``call``; its JSON answer, or the problem raised as an exception."""
        try:
            r = await self.http.request(
                call.method, call.path, json=call.body, timeout=timeout(call, self.default_timeout)
            )
        except httpx.TransportError as err:
            raise _wire.unreachable(self.base_url, call, err, failure_kind(err)) from err
        return _wire.answer(call, r.status_code, r.headers, r.content)

    def send_blocking(self, call: Call, seconds: float) -> Json:
        """Sends ``call`` synchronously on a connection of its own (from a signal handler)."""
        with httpx.Client(base_url=self.base_url, headers=self.headers) as http:
            try:
                r = http.request(call.method, call.path, json=call.body, timeout=seconds)
            except httpx.TransportError as err:
                raise _wire.unreachable(self.base_url, call, err, failure_kind(err)) from err
        return _wire.answer(call, r.status_code, r.headers, r.content)

    async def close(self) -> None:
        await self.http.aclose()


class AsyncPermit(_AsyncExit):
    """A held permit kept alive by a task; as ``Permit``, with ``await``ed methods.

    ``lost`` reads as a bool; ``lost_event`` is an ``asyncio.Event`` set at the same time.
    """

    def __init__(self, transport: AsyncTransport, grant: Grant, handle_sigterm: bool) -> None:
        self.id = grant.id
        self.semaphore = grant.semaphore
        self.permits = grant.permits
        self.fencing_token = grant.fencing_token
        self.ttl_ms = grant.ttl_ms
        self.lost = LostFlag()
        self.lost_event = asyncio.Event()
        self.released = False
        self._releasing = False
        self._t = transport
        _signals.hold(self, handle_sigterm)
        self._task = asyncio.get_running_loop().create_task(self._keep_alive())

    def __repr__(self) -> str:
        return (
            f"AsyncPermit(semaphore={self.semaphore!r}, permits={self.permits}, "
            f"fencing_token={self.fencing_token}, lost={bool(self.lost)})"
        )

    async def __aenter__(self) -> "AsyncPermit":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        try:
            await self.release()
        except ClusterlimitError as err:
            self._stop()
            if exc is None and not self.lost:
                raise
            log.warning(
                "clusterlimit: releasing permit %s of %s failed: %s", self.id, self.semaphore, err
            )

    async def keepalive(self) -> None:
        """Renews the client TTL now; raises ``NotFound``/``PermitLost`` (and sets ``lost``)
        if the permit is gone."""
        try:
            await self._t.send(_wire.keepalive(self.id, interval(self.ttl_ms)))
        except (NotFound, Gone) as err:
            self._mark_lost(f"the sidecar answered the keepalive: {err.detail}")
            raise

    async def shrink(self, permits: int) -> None:
        """Lowers the weight held to ``permits``: the weight freed goes to the waiters now."""
        try:
            answer = await self._t.send(_wire.shrink(self.id, permits))
        except (NotFound, Gone) as err:
            self._mark_lost(f"the sidecar answered the shrink: {err.detail}")
            raise
        self.permits = int(answer.get("permits", permits))

    async def release(
        self, outcome: Optional[str] = None, latency_ms: Optional[float] = None
    ) -> None:
        """Releases the permit (again: nothing happens); see ``Permit.release``."""
        if self.released:
            return
        self._releasing = True
        try:
            await self._t.send(_wire.release(self.id, outcome, latency_ms))
        except (NotFound, Gone) as err:
            self._set_lost(f"gone before its release: {err.detail}")
        except BaseException:
            self._releasing = False
            raise
        self.released = True
        self._stop()

    def _stop(self) -> None:
        self._task.cancel()
        _signals.drop(self)

    def _release_on_signal(self) -> None:
        if self.released:
            return
        self._releasing = True
        self._task.cancel()
        try:
            self._t.send_blocking(_wire.release(self.id, None, None), SIGNAL_RELEASE_TIMEOUT)
        except (NotFound, Gone):
            pass
        self.released = True
        _signals.drop(self)

    def _set_lost(self, why: str) -> bool:
        if self.lost._set(why):
            self.lost_event.set()
            return True
        return False

    def _mark_lost(self, why: str) -> None:
        if self._releasing or self.released:
            return  # a keepalive that crossed the release: not a loss
        if self._set_lost(why):
            log.warning("clusterlimit: permit %s of %s lost: %s", self.id, self.semaphore, why)

    async def _keep_alive(self) -> None:
        every = interval(self.ttl_ms)
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(every)
            try:
                await self._t.send(_wire.keepalive(self.id, every))
                last_ok = time.monotonic()
            except ClusterlimitError as err:
                why = lost_reason(err, time.monotonic() - last_ok, self.ttl_ms)
                if why is not None:
                    self._mark_lost(why)
                    return
            except Exception as err:  # never let the task die silently
                self._mark_lost(f"the keepalive failed: {err}")
                return


class AsyncReservation(_AsyncExit):
    """An admitted reservation; as ``Reservation``, with ``await``ed methods."""

    def __init__(self, transport: AsyncTransport, info: Reserved) -> None:
        self.info = info
        self.id = info.id
        self.settled = False
        self._t = transport

    async def __aenter__(self) -> "AsyncReservation":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.settled:
            return
        try:
            await self.keep()
        except ClusterlimitError as err:
            if exc is None:
                raise
            log.warning("clusterlimit: keeping reservation %s failed: %s", self.id, err)

    async def settle(self, actual: int) -> Balance:
        """Settles at ``actual`` units; the key's balance after."""
        body = await self._t.send(_wire.settle(self.info.name, self.id, actual))
        self.settled = True
        return Balance.from_json(body)

    async def keep(self) -> Balance:
        """Settles at the estimate; the key's balance after."""
        body = await self._t.send(_wire.keep(self.info.name, self.id))
        self.settled = True
        return Balance.from_json(body)


class AsyncClient:
    """The asyncio client of one sidecar: the arguments and calls of ``Client``."""

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
        self._t = AsyncTransport(self.url, token, timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the connections (held permits are not released: release them first)."""
        await self._t.close()

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
    ) -> Pending[AsyncPermit]:
        """``await`` it for the permit, or ``async with`` it; see ``Client.permit``."""
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

        async def start() -> AsyncPermit:
            grant = Grant.from_json(await self._t.send(call))
            return AsyncPermit(self._t, grant, self.handle_sigterm)

        return Pending(start)

    async def status(self, name: str) -> Dict[str, Any]:
        """The semaphore's status: capacity, used, holders, waiters."""
        return await self._t.send(_wire.status(name))

    async def set_capacity(self, name: str, capacity: int) -> Dict[str, Any]:
        """Sets (or creates with) ``capacity``; the new status."""
        return await self._t.send(_wire.set_capacity(name, capacity))

    async def set_quota(
        self,
        name: str,
        *,
        limit: int,
        period: Union[str, float],
        burst: Optional[int] = None,
        algorithm: Optional[str] = None,
        ban: Optional[Union[str, float]] = None,
    ) -> Dict[str, Any]:
        """See ``Client.set_quota``."""
        call = _wire.set_quota(
            name, limit=limit, period=period, burst=burst, algorithm=algorithm, ban=ban
        )
        return await self._t.send(call)

    async def check(
        self,
        name: str,
        key: str,
        cost: int = 1,
        *,
        class_: Optional[str] = None,
        flow: Optional[str] = None,
    ) -> Decision:
        """See ``Client.check``: a denial is ``allowed`` false, not an error."""
        return Decision.from_json(await self._t.send(_wire.check(name, key, cost, class_, flow)))

    async def wait(
        self,
        name: str,
        key: str,
        cost: int = 1,
        *,
        timeout: float = 30.0,
        class_: Optional[str] = None,
        flow: Optional[str] = None,
    ) -> Decision:
        """See ``Client.wait``: raises ``OverLimit`` past the timeout."""
        call = _wire.wait(name, key, cost, timeout, class_, flow)
        return Decision.from_json(await self._t.send(call))

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
    ) -> Pending[AsyncReservation]:
        """``await`` it for the reservation, or ``async with`` it; see ``Client.reserve``."""
        call = _wire.reserve(name, key, estimate, class_, flow, timeout, settle_within)

        async def start() -> AsyncReservation:
            return AsyncReservation(self._t, Reserved.from_json(await self._t.send(call)))

        return Pending(start)

    async def charge(self, name: str, key: str, cost: int) -> Balance:
        """See ``Client.charge``."""
        return Balance.from_json(await self._t.send(_wire.charge(name, key, cost)))

    async def refund(self, name: str, key: str, amount: int) -> Balance:
        """See ``Client.refund``."""
        return Balance.from_json(await self._t.send(_wire.refund(name, key, amount)))

    async def balance(self, name: str, key: str) -> Balance:
        """See ``Client.balance``."""
        return Balance.from_json(await self._t.send(_wire.balance(name, key)))
