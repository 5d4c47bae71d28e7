"""Median and p99 of uncontended calls through the Python client, beside the same requests
sent raw with httpx and with curl (one process per request), against one sidecar.

    python bench/latency.py --bin target/release/clusterlimit [--store memory://] [--n 500]

Starts its own sidecar (``serve --listen 127.0.0.1:0``); each row runs ``--n`` calls after
50 unmeasured ones. Rows: a permit taken and released (``with client.permit``: POST +
DELETE, the keepalive thread started and stopped), a rate check, and the same two as raw
requests.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import uuid
from typing import Callable, List

import httpx

from clusterlimit import Client

WARMUP = 50


def start_sidecar(binary: str, store: str) -> "tuple[subprocess.Popen[bytes], str]":
    proc = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--store", store, "--log", "warn"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline().decode()
        if "listening on http://" in line:
            return proc, "http://" + line.split("listening on http://")[1].split()[0]
        if not line:
            break
    proc.kill()
    raise SystemExit("the sidecar printed no address")


def measure(n: int, call: Callable[[], None]) -> List[float]:
    for _ in range(WARMUP):
        call()
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call()
        out.append((time.perf_counter() - t) * 1000)
    return out


def row(label: str, ms: List[float]) -> None:
    ms = sorted(ms)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(f"| {label} | {statistics.median(ms):.3f} | {p99:.3f} |", flush=True)


def curl(*args: str) -> str:
    return subprocess.run(["curl", "-s", *args], check=True, capture_output=True, text=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--store", default="memory://")
    ap.add_argument("--n", type=int, default=500)
    args = ap.parse_args()
    proc, url = start_sidecar(args.bin, args.store)
    sem, lim = f"bench-{uuid.uuid4().hex[:8]}", f"bench-{uuid.uuid4().hex[:8]}"
    try:
        client = Client(url, handle_sigterm=False)
        client.set_capacity(sem, 1)
        client.set_quota(lim, limit=1_000_000_000, period="1s")
        raw = httpx.Client(base_url=url)

        def client_pair() -> None:
            with client.permit(sem, timeout=5.0):
                pass

        def raw_pair() -> None:
            r = raw.post(f"/v1/semaphores/{sem}/permits", json={"timeout_ms": 5000})
            raw.delete(r.headers["location"]).raise_for_status()

        def curl_pair() -> None:
            loc = curl("-o", "/dev/null", "-w", "%header{location}", "-X", "POST",
                       f"{url}/v1/semaphores/{sem}/permits", "-d", '{"timeout_ms":5000}')
            curl("-X", "DELETE", f"{url}{loc}")

        print(f"store {args.store}, {args.n} calls each, ms\n")
        print("| path | p50 | p99 |\n|---|---|---|")
        row("Python Client: `with permit()` (acquire + release)", measure(args.n, client_pair))
        row("httpx raw: POST + DELETE", measure(args.n, raw_pair))
        row("curl: POST + DELETE (2 processes)", measure(args.n, curl_pair))
        row("Python Client: `check()`", measure(args.n, lambda: client.check(lim, "k") and None))
        row("httpx raw: POST check", measure(
            args.n, lambda: raw.post(f"/v1/ratelimits/{lim}/check", json={"key": "k"}) and None))
        check_url = f"{url}/v1/ratelimits/{lim}/check"
        row("curl: POST check (1 process)", measure(
            args.n, lambda: curl("-X", "POST", check_url, "-d", '{"key":"k"}') and None))
    finally:
        proc.kill()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
