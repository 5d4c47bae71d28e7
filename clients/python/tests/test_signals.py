"""SIGTERM to a process holding a permit: released at once, then the previous disposition."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from clusterlimit import Client

HOLDER = Path(__file__).with_name("sigterm_holder.py")


def run_holder(url: str, name: str, mode: str) -> "subprocess.Popen[str]":
    proc = subprocess.Popen(
        [sys.executable, str(HOLDER), url, name, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the holder prints once the permit is held
    if not line.startswith("held"):
        proc.kill()
        _, err = proc.communicate(timeout=10)
        pytest.fail(f"the holder did not take the permit: {line!r}\n{err}")
    return proc


@pytest.mark.parametrize(
    "mode,exit_code",
    [("plain", -signal.SIGTERM), ("async", -signal.SIGTERM), ("chained", 3)],
)
def test_sigterm_releases_then_chains(client: Client, name: str, mode: str, exit_code: int) -> None:
    proc = run_holder(client.url, name, mode)
    try:
        assert client.status(name)["used"] == 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    # plain/async: the default disposition ends it by SIGTERM; chained: the program's handler.
    assert proc.returncode == exit_code, (proc.returncode, out, err)
    if mode == "chained":
        assert "previous handler ran" in out
    # The permit's TTL is 60 s: only the handler's release explains a free semaphore now.
    assert client.status(name)["used"] == 0


def test_ignored_sigterm_stays_ignored_but_releases(client: Client, name: str) -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "from clusterlimit import Client\n"
        "c = Client(sys.argv[1])\n"
        "p = c.permit(sys.argv[2], capacity=1, ttl=60.0)\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n"
        "print('released' if p.released else 'held still', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, client.url, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "held"
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # the handler runs before the line below arrives
        out, err = proc.communicate("go\n", timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert out.strip() == "released"
    assert client.status(name)["used"] == 0
