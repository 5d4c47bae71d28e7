"""Permits through the sync client against the real sidecar on a real etcd."""

from __future__ import annotations

import threading
import time
from typing import List

import httpx
import pytest

from clusterlimit import AcquireTimeout, Client, Conflict, NotFound
from conftest import Sidecar, eventually


def used(client: Client, name: str) -> int:
    return int(client.status(name)["used"])


def test_acquire_and_release(client: Client, name: str) -> None:
    with client.permit(name, capacity=4, timeout=5.0, owner="py-test") as p:
        assert p.semaphore == name and p.permits == 1
        assert p.fencing_token >= 1 and p.ttl_ms > 0
        assert not p.lost
        status = client.status(name)
        assert status["used"] == 1 and status["capacity"] == 4
        assert status["holders"][0]["owner"] == "py-test"
        assert status["holders"][0]["fencing_token"] == p.fencing_token
    assert p.released and used(client, name) == 0
    p.release()  # again: nothing happens


def test_weights_and_shrink(client: Client, name: str) -> None:
    with client.permit(name, capacity=10, permits=8) as p:
        assert used(client, name) == 8
        p.shrink(5)
        assert p.permits == 5 and used(client, name) == 5
    assert used(client, name) == 0


def test_timeout(client: Client, name: str) -> None:
    with client.permit(name, capacity=1):
        start = time.monotonic()
        with pytest.raises(AcquireTimeout) as caught:
            client.permit(name, timeout=0.3)
        elapsed = time.monotonic() - start
    assert 0.25 <= elapsed < 5.0, elapsed
    err = caught.value
    assert err.status == 429 and err.code == "timeout" and err.retry_after == 1
    assert err.type == "about:blank" and err.detail
    assert used(client, name) == 0


def test_contention_between_two_clients_is_fifo(sidecar: Sidecar, name: str) -> None:
    order: List[str] = []
    errors: List[BaseException] = []
    with Client(sidecar.url) as a, Client(sidecar.url) as b:

        def waiter(label: str, c: Client) -> None:
            try:
                with c.permit(name, timeout=20.0):
                    order.append(label)
                    time.sleep(0.2)
            except BaseException as err:  # reported by the main thread
                errors.append(err)

        first = a.permit(name, capacity=1)
        threads = []
        for label, c in (("b-1", b), ("a-2", a), ("b-3", b)):
            t = threading.Thread(target=waiter, args=(label, c))
            t.start()
            threads.append(t)
            # The next waiter starts only once this one is queued: FIFO has an order to keep.
            eventually(f"{label} queued", lambda n=len(threads): a.status(name)["waiting"] == n)
        first.release()
        for t in threads:
            t.join(timeout=30)
            assert not t.is_alive()
    assert not errors, errors
    assert order == ["b-1", "a-2", "b-3"]


def test_keepalive_holds_the_permit_past_its_ttl(sidecar: Sidecar, name: str) -> None:
    with Client(sidecar.url) as c, Client(sidecar.url) as other:
        with c.permit(name, capacity=1, ttl=0.6) as p:
            time.sleep(2.0)  # over 3 client TTLs: only the keepalives keep it
            assert not p.lost
            assert used(c, name) == 1
            with pytest.raises(AcquireTimeout):
                other.permit(name, timeout=0.0)
        assert not p.lost
    with Client(sidecar.url) as c:
        assert used(c, name) == 0


def test_without_keepalives_the_sidecar_expires_it(client: Client, name: str) -> None:
    raw = httpx.post(
        f"{client.url}/v1/semaphores/{name}/permits",
        json={"capacity": 1, "ttl_ms": 500},
        timeout=10,
    )
    assert raw.status_code == 201
    eventually("the unkept permit expired", lambda: used(client, name) == 0, limit=5)


def test_released_behind_its_back_sets_lost(client: Client, name: str) -> None:
    with client.permit(name, capacity=1, ttl=0.6) as p:
        httpx.delete(f"{client.url}/v1/permits/{p.id}", timeout=10).raise_for_status()
        assert p.lost.wait(3.0), "lost not set"
        assert "no permit" in (p.lost.reason or ""), p.lost.reason
        with pytest.raises(NotFound):
            p.keepalive()
    assert p.released


def test_released_on_exception(client: Client, name: str) -> None:
    with pytest.raises(RuntimeError, match="the work failed"):
        with client.permit(name, capacity=1, ttl=60.0):
            raise RuntimeError("the work failed")
    # 60 s TTL: only the release explains a free semaphore now.
    assert used(client, name) == 0


def test_capacity_mismatch_and_absent_semaphore(client: Client, name: str) -> None:
    with pytest.raises(NotFound) as absent:
        client.permit(name, timeout=0.0)
    assert absent.value.status == 404 and name in absent.value.detail
    client.set_capacity(name, 2)
    with pytest.raises(Conflict) as other:
        client.permit(name, capacity=3, timeout=0.0)
    assert other.value.status == 409 and other.value.field == "capacity"
