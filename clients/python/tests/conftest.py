"""Fixtures: a real etcd and the real sidecar binary, started here as child processes.

The sidecar is ``$CLUSTERLIMIT_BIN``, else ``target/debug/clusterlimit`` of this repository
(``$CARGO_TARGET_DIR/debug/clusterlimit`` when that is set); etcd is ``$CLUSTERLIMIT_ETCD_BIN``
or ``etcd`` from PATH. A missing one fails the tests with how to get it: they never skip.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT = 20.0


def free_ports(n: int) -> List[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bound at once, then freed)."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def sidecar_binary() -> Path:
    env = os.environ.get("CLUSTERLIMIT_BIN")
    if env:
        path = Path(env)
    else:
        target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
        path = target / "debug" / "clusterlimit"
    if not path.is_file():
        pytest.fail(
            f"the clusterlimit binary is not at {path}: build it with `cargo build "
            "--all-features --bin clusterlimit` in the repository, or set $CLUSTERLIMIT_BIN",
            pytrace=False,
        )
    return path


def etcd_binary() -> str:
    path = os.environ.get("CLUSTERLIMIT_ETCD_BIN") or shutil.which("etcd")
    if not path:
        pytest.fail(
            "etcd not found on PATH (or $CLUSTERLIMIT_ETCD_BIN): install it with "
            "`apt-get install etcd-server`, or run the repository's `scripts/test --install-deps`",
            pytrace=False,
        )
    return path


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Ends ``proc`` (if still running) and reaps it, bounded."""
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


class Etcd:
    """One etcd member on free loopback ports, its data in ``dir``."""

    def __init__(self, dir: Path) -> None:
        client, peer = free_ports(2)
        self.url = f"http://127.0.0.1:{client}"
        log = open(dir / "etcd.log", "wb")
        self.proc = subprocess.Popen(
            [
                etcd_binary(),
                "--name", "py",
                "--data-dir", str(dir / "data"),
                "--listen-client-urls", self.url,
                "--advertise-client-urls", self.url,
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"py=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self._wait_healthy(dir / "etcd.log")

    def _wait_healthy(self, log: Path) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"etcd exited at start:\n{log.read_text()[-3000:]}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"etcd not healthy within {START_TIMEOUT}s:\n{log.read_text()[-3000:]}")

    def store(self, prefix: str) -> str:
        """A store URL under a prefix of its own."""
        return f"etcd://{self.url.removeprefix('http://')}/{prefix}"


class Sidecar:
    """A running ``clusterlimit serve`` on a free port; its address read from its stdout."""

    def __init__(self, store: str, *args: str) -> None:
        self.store = store
        cmd = [str(sidecar_binary()), "serve", "--listen", "127.0.0.1:0", "--store", store, *args]
        env = {k: v for k, v in os.environ.items() if k not in ("CLUSTERLIMIT_STORE", "RUST_LOG")}
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env
        )
        self.stderr: "queue.Queue[bytes]" = queue.Queue()
        lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        threading.Thread(target=self._drain, args=(self.proc.stdout, lines), daemon=True).start()
        err = self.proc.stderr
        threading.Thread(target=self._drain, args=(err, self.stderr), daemon=True).start()
        self.url = self._read_address(lines)

    @staticmethod
    def _drain(pipe: "Optional[object]", into: "queue.Queue[Optional[bytes]]") -> None:
        for line in iter(pipe.readline, b""):  # type: ignore[union-attr]
            into.put(line)
        into.put(None)

    def _read_address(self, lines: "queue.Queue[Optional[bytes]]") -> str:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                break
            if line is None:
                raise RuntimeError(f"clusterlimit serve exited at start:\n{self.log()}")
            text = line.decode(errors="replace")
            if "listening on http://" in text:
                return "http://" + text.split("listening on http://")[1].split()[0]
        raise RuntimeError(f"clusterlimit serve printed no address within {START_TIMEOUT}s")

    def log(self) -> str:
        out = []
        while not self.stderr.empty():
            line = self.stderr.get()
            if line:
                out.append(line.decode(errors="replace"))
        return "".join(out)[-5000:]

    def kill(self) -> None:
        stop(self.proc, signal.SIGKILL)


@pytest.fixture(scope="session")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    server = Etcd(tmp_path_factory.mktemp("etcd"))
    yield server
    stop(server.proc)


@pytest.fixture(scope="session")
def sidecar(etcd: Etcd) -> Iterator[Sidecar]:
    """One sidecar shared by the tests (each uses names of its own)."""
    side = Sidecar(etcd.store(f"py-{uuid.uuid4().hex[:8]}"))
    yield side
    side.kill()


@pytest.fixture
def name() -> str:
    """A semaphore or limit name of this test's own."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(sidecar: Sidecar) -> "Iterator[object]":
    from clusterlimit import Client

    with Client(sidecar.url) as c:
        yield c


def eventually(what: str, check: "object", limit: float = 10.0) -> object:
    """Polls ``check()`` every 20 ms until it returns something true, at most ``limit`` s."""
    deadline = time.monotonic() + limit
    for _ in range(int(limit / 0.02) + 1):
        value = check()  # type: ignore[operator]
        if value:
            return value
        if time.monotonic() >= deadline:
            break
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {limit}s")
