"""Each error the sidecar answers, as the exception the client raises for it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import clusterlimit
from clusterlimit import (
    Client,
    ClusterlimitError,
    InvalidArgument,
    NotFound,
    SidecarUnreachable,
    Unauthorized,
)
from conftest import Etcd, Sidecar, free_ports


def test_invalid_argument_names_the_field(client: Client, name: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        client.permit(name, capacity=2, permits=0)
    err = caught.value
    assert err.status == 400 and err.code == "invalid_field" and err.field == "permits"
    assert err.type == "about:blank"
    assert "permits must be between 1 and 1000000, got 0" in err.detail
    assert "(field permits)" in str(err) and "HTTP 400" in str(err)
    with pytest.raises(InvalidArgument) as ttl:
        client.permit(name, capacity=2, ttl=0.1)
    assert ttl.value.field == "ttl_ms"


def test_negative_time_refused_before_any_request(name: str) -> None:
    c = Client(f"http://127.0.0.1:{free_ports(1)[0]}")  # nothing listens: no request made
    with pytest.raises(InvalidArgument) as caught:
        c.permit(name, timeout=-1)
    assert caught.value.field == "timeout" and caught.value.status is None


def test_not_found(client: Client, name: str) -> None:
    with pytest.raises(NotFound) as caught:
        client.balance(name, "k")
    assert caught.value.status == 404 and name in caught.value.detail
    with pytest.raises(NotFound):
        client.status(name)


def test_unreachable_names_the_url(name: str) -> None:
    url = f"http://127.0.0.1:{free_ports(1)[0]}"
    c = Client(url)
    start = time.monotonic()
    with pytest.raises(SidecarUnreachable) as caught:
        c.permit(name, capacity=1)
    assert time.monotonic() - start < 5.0
    err = caught.value
    assert isinstance(err, clusterlimit.Unavailable) and err.refused
    assert url in str(err) and "POST /v1/semaphores/" in str(err)
    assert "is `clusterlimit serve` running there?" in str(err)


def test_token(etcd: Etcd, tmp_path: Path, name: str) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    side = Sidecar(etcd.store("py-token"), "--token-file", str(token))
    try:
        with pytest.raises(Unauthorized) as caught:
            Client(side.url).permit(name, capacity=1)
        assert caught.value.status == 401 and "s3cret" not in str(caught.value)
        with Client(side.url, token="wrong") as c, pytest.raises(Unauthorized):
            c.check("x", "k")
        with Client(side.url, token="s3cret") as c, c.permit(name, capacity=1) as p:
            assert p.fencing_token >= 1
    finally:
        side.kill()


def test_every_error_is_a_clusterlimit_error() -> None:
    for cls in (
        clusterlimit.InvalidArgument,
        clusterlimit.Unauthorized,
        clusterlimit.NotFound,
        clusterlimit.Conflict,
        clusterlimit.Gone,
        clusterlimit.PermitLost,
        clusterlimit.OverLimit,
        clusterlimit.AcquireTimeout,
        clusterlimit.Unavailable,
        clusterlimit.SidecarUnreachable,
    ):
        assert issubclass(cls, ClusterlimitError)
    assert issubclass(clusterlimit.PermitLost, clusterlimit.Gone)
    assert issubclass(clusterlimit.AcquireTimeout, clusterlimit.OverLimit)
