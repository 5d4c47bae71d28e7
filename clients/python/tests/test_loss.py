"""A permit whose sidecar is SIGKILLed, or whose store goes away: ``lost`` is set, and every
later call says clearly what is wrong."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from clusterlimit import (
    AcquireTimeout,
    AsyncClient,
    Client,
    PermitLost,
    SidecarUnreachable,
    Unavailable,
)
from conftest import Etcd, Sidecar, eventually, stop


def test_sidecar_killed_while_held(etcd: Etcd, name: str) -> None:
    store = etcd.store(f"py-kill-{uuid.uuid4().hex[:8]}")
    side = Sidecar(store, "--session-ttl", "2s")
    try:
        c = Client(side.url)
        with c.permit(name, capacity=1, ttl=1.5) as p:
            side.kill()
            assert p.lost.wait(3.0), "lost not set within 3 s of the kill"
            assert side.url in (p.lost.reason or ""), p.lost.reason
            # Later calls name the sidecar and what to do.
            with pytest.raises(SidecarUnreachable) as caught:
                c.check("api", "k")
            assert side.url in str(caught.value) and "clusterlimit serve" in str(caught.value)
            assert caught.value.refused and caught.value.status is None
        # Leaving the block does not raise for a permit known lost.
        assert p.lost
        # The loss is real: another sidecar on the store gets the permit once the killed
        # one's session (2 s) expires.
        other = Sidecar(store, "--session-ttl", "2s")
        try:
            with Client(other.url) as c2:
                start = time.monotonic()
                with c2.permit(name, timeout=10.0) as p2:
                    assert time.monotonic() - start < 6.0
                    assert p2.fencing_token > p.fencing_token
        finally:
            other.kill()
    finally:
        side.kill()


def test_sidecar_killed_while_held_async(etcd: Etcd, name: str) -> None:
    side = Sidecar(etcd.store(f"py-akill-{uuid.uuid4().hex[:8]}"), "--session-ttl", "2s")

    async def scenario() -> None:
        async with AsyncClient(side.url) as c:
            async with c.permit(name, capacity=1, ttl=1.5) as p:
                side.kill()
                await asyncio.wait_for(p.lost_event.wait(), 3.0)
                assert p.lost and side.url in (p.lost.reason or "")
                with pytest.raises(SidecarUnreachable):
                    await c.status(name)

    try:
        asyncio.run(asyncio.wait_for(scenario(), 20))
    finally:
        side.kill()


def test_store_lost_sets_lost_and_answers_unavailable(tmp_path: Path, name: str) -> None:
    db = Etcd(tmp_path)
    side = Sidecar(db.store("py-store-lost"), "--session-ttl", "2s", "--request-timeout", "1s")
    try:
        c = Client(side.url, timeout=10.0)
        c.set_quota("tokens", limit=100, period="1m")
        with c.permit(name, capacity=1, ttl=5.0) as p:
            stop(db.proc)  # SIGKILL: the sidecar's session ends after its 2 s TTL
            assert p.lost.wait(12.0), "lost not set after the store went away"
            assert "lost" in (p.lost.reason or ""), p.lost.reason
            with pytest.raises(PermitLost) as lost:
                p.keepalive()
            assert lost.value.status == 410 and lost.value.code == "permit_lost"
            # Reservations are not answered without the store: 503, saying so.
            with pytest.raises(Unavailable) as down:
                c.reserve("tokens", "k", 10, timeout=0.5)
            assert down.value.status == 503 and down.value.detail
            assert not isinstance(down.value, SidecarUnreachable)
            # An acquire answers within its timeout, an error either way.
            start = time.monotonic()
            with pytest.raises((Unavailable, AcquireTimeout)):
                c.permit(f"{name}-2", capacity=1, timeout=1.0)
            assert time.monotonic() - start < 8.0
    finally:
        side.kill()
        stop(db.proc)
