"""Rate limits through the sync client: check, wait, reservations, charges, balances."""

from __future__ import annotations

import time

import pytest

from clusterlimit import Client, Conflict, Gone, InvalidArgument, OverLimit


def test_check_admits_then_denies(client: Client, name: str) -> None:
    quota = client.set_quota(name, limit=2, period="1m", algorithm="fixed_window")
    assert quota["limit"] == 2 and quota["algorithm"] == "fixed_window"
    first = client.check(name, "user-42")
    assert first.allowed and first.remaining == 1 and first.retry_after_ms is None
    assert first.source == "store" and first.key == "user-42" and first.name == name
    assert client.check(name, "user-42")
    denied = client.check(name, "user-42")
    assert not denied and not denied.allowed and denied.remaining == 0
    assert denied.retry_after_ms is not None and denied.retry_after_ms > 0
    assert client.check(name, "user-43").allowed  # keys are apart


def test_cost_is_all_or_nothing(client: Client, name: str) -> None:
    client.set_quota(name, limit=5, period="1m", algorithm="fixed_window")
    assert client.check(name, "k", cost=3).remaining == 2
    assert not client.check(name, "k", cost=3).allowed  # 3 > 2: nothing taken
    assert client.check(name, "k", cost=2).remaining == 0


def test_wait_is_paced_and_times_out(client: Client, name: str) -> None:
    client.set_quota(name, limit=10, period=1.0, burst=1)  # one every 100 ms
    assert client.wait(name, "k").allowed
    start = time.monotonic()
    assert client.wait(name, "k", timeout=2.0).allowed
    assert 0.05 <= time.monotonic() - start < 2.0
    client.set_quota(name, limit=1, period="1h", burst=1)
    start = time.monotonic()
    with pytest.raises(OverLimit) as caught:
        for _ in range(2):  # the first takes the only unit of the hour
            client.wait(name, "other", timeout=0.2)
    assert time.monotonic() - start < 3.0
    err = caught.value
    assert err.status == 429 and err.code == "rate_limited" and (err.retry_after or 0) >= 1
    assert err.body["key"] == "other"


def test_reserve_then_settle_gives_back_the_rest(client: Client, name: str) -> None:
    client.set_quota(name, limit=10000, period="1d")
    r = client.reserve(name, "tenant-a", 4000)
    assert r.info.estimate == 4000 and r.info.remaining == 6000 and r.id
    balance = r.settle(1200)
    assert balance.remaining == 8800 and balance.debt == 0 and r.settled
    with pytest.raises(Conflict) as again:
        r.settle(1000)
    assert again.value.code == "already_settled"


def test_reservation_kept_on_exit(client: Client, name: str) -> None:
    client.set_quota(name, limit=100, period="1d")
    with client.reserve(name, "k", 30) as r:
        pass
    assert r.settled and client.balance(name, "k").remaining == 70
    with pytest.raises(ValueError):
        with client.reserve(name, "k", 10):
            raise ValueError("the work failed")
    assert client.balance(name, "k").remaining == 60


def test_reserve_denied_takes_nothing(client: Client, name: str) -> None:
    client.set_quota(name, limit=10, period="1d")
    client.charge(name, "k", 8)
    with pytest.raises(OverLimit) as caught:
        client.reserve(name, "k", 5)
    assert caught.value.status == 429 and caught.value.retry_after
    assert "id" not in caught.value.body
    assert client.balance(name, "k").remaining == 2


def test_expired_reservation_is_gone(client: Client, name: str) -> None:
    client.set_quota(name, limit=100, period="1d")
    r = client.reserve(name, "k", 10, settle_within=0.05)
    time.sleep(1.0)  # past its 50 ms; the table ends expired ones within a quarter second
    with pytest.raises(Gone) as caught:
        r.settle(1)
    assert caught.value.status == 410 and caught.value.code == "reservation_expired"
    assert client.balance(name, "k").remaining == 90  # settled at its estimate


def test_charge_into_debt_then_refund(client: Client, name: str) -> None:
    client.set_quota(name, limit=10000, period="1d")
    key = "tenant/42 ü"  # a slash, a space and UTF-8 in the path
    charged = client.charge(name, key, 12000)
    assert charged.debt == 2000 and charged.remaining == 0 and charged.key == key
    assert charged.retry_after_ms is not None
    assert not client.check(name, key).allowed
    refunded = client.refund(name, key, 5000)
    assert refunded.debt == 0 and refunded.remaining == 3000
    assert client.balance(name, key).remaining == 3000


def test_bad_rate_input_names_the_field(client: Client, name: str) -> None:
    client.set_quota(name, limit=10, period="1m")
    with pytest.raises(InvalidArgument) as zero:
        client.check(name, "k", cost=0)
    assert zero.value.field == "cost" and zero.value.status == 400
    with pytest.raises(InvalidArgument) as empty:
        client.check(name, "")
    assert empty.value.field == "key"
    with pytest.raises(InvalidArgument) as actual:
        client.reserve(name, "k", 1).settle(-1)
    assert actual.value.field == "actual"
