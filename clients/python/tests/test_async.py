"""The asyncio client against the real sidecar: the same calls, awaited."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Coroutine, List

import pytest

from clusterlimit import AcquireTimeout, AsyncClient, OverLimit
from conftest import Sidecar


def run(coro: "Coroutine[Any, Any, None]") -> None:
    asyncio.run(asyncio.wait_for(coro, 30))


def test_permit_async_with_and_await(sidecar: Sidecar, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(sidecar.url) as c:
            async with c.permit(name, capacity=2, ttl=0.6) as p:
                assert p.fencing_token >= 1 and not p.lost
                await asyncio.sleep(2.0)  # over 3 client TTLs: the task keeps it alive
                assert not p.lost and (await c.status(name))["used"] == 1
            assert p.released and (await c.status(name))["used"] == 0
            q = await c.permit(name)
            await q.shrink(1)
            await q.release()
            assert (await c.status(name))["used"] == 0

    run(scenario())


def test_timeout_and_fifo(sidecar: Sidecar, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(sidecar.url) as a, AsyncClient(sidecar.url) as b:
            first = await a.permit(name, capacity=1)
            with pytest.raises(AcquireTimeout):
                await b.permit(name, timeout=0.2)
            order: List[str] = []

            async def waiter(label: str, c: AsyncClient) -> None:
                async with c.permit(name, timeout=20.0):
                    order.append(label)
                    await asyncio.sleep(0.1)

            tasks = []
            for i, (label, c) in enumerate((("b-1", b), ("a-2", a), ("b-3", b))):
                tasks.append(asyncio.create_task(waiter(label, c)))
                for _ in range(500):  # each queued before the next starts, 10 s at most
                    if (await a.status(name))["waiting"] == i + 1:
                        break
                    await asyncio.sleep(0.02)
            await first.release()
            await asyncio.gather(*tasks)
            assert order == ["b-1", "a-2", "b-3"]

    run(scenario())


def test_released_on_exception(sidecar: Sidecar, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(sidecar.url) as c:
            with pytest.raises(RuntimeError):
                async with c.permit(name, capacity=1, ttl=60.0):
                    raise RuntimeError("the work failed")
            assert (await c.status(name))["used"] == 0

    run(scenario())


def test_rate_calls(sidecar: Sidecar, name: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(sidecar.url) as c:
            await c.set_quota(name, limit=100, period="1d")
            assert (await c.check(name, "k", cost=10)).remaining == 90
            assert (await c.wait(name, "k", cost=10, timeout=1.0)).remaining == 80
            r = await c.reserve(name, "k", 50)
            assert (await r.settle(20)).remaining == 60
            async with c.reserve(name, "k", 10):
                pass
            assert (await c.charge(name, "k", 70)).debt == 20
            assert not (await c.check(name, "k")).allowed
            start = time.monotonic()
            with pytest.raises(OverLimit):
                await c.wait(name, "k", timeout=0.2)
            assert time.monotonic() - start < 3.0
            assert (await c.refund(name, "k", 30)).remaining == 10
            assert (await c.balance(name, "k")).remaining == 10

    run(scenario())
