#!/usr/bin/env python3
"""Run a command while holding a permit from a clusterlimit sidecar (`clusterlimit serve`).

A client of the sidecar's HTTP API in plain Python (standard library only), the way a program
in any language uses it: acquire (long-poll), keep the permit alive every TTL/3 while the
command runs, stop the command if the permit is lost, release when it ends.

    clusterlimit serve &                      # 127.0.0.1:7878, memory:// - no servers needed
    python3 examples/sidecar_client.py --semaphore nightly-export --capacity 2 -- ./export.sh

The command gets CLUSTERLIMIT_SEMAPHORE, CLUSTERLIMIT_FENCING_TOKEN, CLUSTERLIMIT_PERMITS and
CLUSTERLIMIT_PERMIT_ID in its environment. Exit codes follow `clusterlimit run`: the command's
own (128+N if it died of signal N), 64 bad arguments or request, 69 sidecar unreachable or
unavailable, 75 no permit within --timeout-ms (HTTP 429), 76 the permit was lost while the
command ran (it got SIGTERM, then SIGKILL after --grace).

A sidecar started with `serve --token-file` wants the same token on every request: pass
`--token-file PATH` (or set CLUSTERLIMIT_TOKEN_FILE).
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

USAGE, UNAVAILABLE, TIMEOUT, LOST = 64, 69, 75, 76

# `Authorization: Bearer TOKEN` on every request when the sidecar has a token (--token-file).
AUTH = {}


class Unreachable(Exception):
    """The sidecar did not answer (refused, timed out, DNS...)."""


def call(method, url, body=None, timeout=10.0):
    """One HTTP request; returns (status, parsed JSON body or {}, headers)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data is not None else {}
    headers.update(AUTH)
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as res:
            return res.status, parse(res.read()), res.headers
    except urllib.error.HTTPError as err:  # 4xx/5xx still carry a problem+json body
        return err.code, parse(err.read()), err.headers
    except (urllib.error.URLError, OSError) as err:
        raise Unreachable(str(getattr(err, "reason", err))) from err


def parse(raw):
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        return {"detail": raw.decode(errors="replace")}


def log(msg):
    print(f"sidecar_client: {msg}", file=sys.stderr, flush=True)


class KeepAlive(threading.Thread):
    """Renews the permit's client TTL every ttl/3; on loss, stops the command."""

    def __init__(self, base, permit_id, ttl_ms, on_lost):
        super().__init__(daemon=True)
        self.url = f"{base}/v1/permits/{permit_id}/keepalive"
        self.ttl = ttl_ms / 1000.0
        self.on_lost = on_lost
        self.stop = threading.Event()
        self.lost = threading.Event()

    def run(self):
        last_ok = time.monotonic()
        while not self.stop.wait(self.ttl / 3):
            try:
                status, body, _ = call("POST", self.url, timeout=self.ttl / 3)
            except Unreachable as err:
                # The sidecar releases the permit one TTL after the last keepalive it got.
                if time.monotonic() - last_ok >= self.ttl:
                    self.lose(f"no keepalive answered for {self.ttl:.1f}s ({err})")
                    return
                continue
            if status == 200:
                last_ok = time.monotonic()
            elif status in (404, 410):  # 404: expired or released; 410: lost in the store
                self.lose(body.get("detail", f"keepalive answered {status}"))
                return

    def lose(self, why):
        log(f"permit lost: {why}")
        self.lost.set()
        self.on_lost()


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", default=os.environ.get("CLUSTERLIMIT_SIDECAR", "http://127.0.0.1:7878"))
    ap.add_argument("--semaphore", required=True)
    ap.add_argument("--capacity", type=int, help="create the semaphore with this capacity if absent")
    ap.add_argument("--permits", type=int, default=1)
    ap.add_argument("--timeout-ms", type=int, default=30000, help="longest wait for the permit")
    ap.add_argument("--ttl-ms", type=int, default=15000, help="client TTL: released this long after the last keepalive")
    ap.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL on loss")
    ap.add_argument("--owner", help="owner label shown in status")
    ap.add_argument(
        "--token-file",
        default=os.environ.get("CLUSTERLIMIT_TOKEN_FILE"),
        help="file holding the sidecar's bearer token (serve --token-file)",
    )
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.print_usage(sys.stderr)
        log("a command to run is required after --")
        return USAGE

    if args.token_file:
        try:
            with open(args.token_file, encoding="ascii") as f:
                AUTH["Authorization"] = "Bearer " + f.read().strip()
        except (OSError, ValueError) as err:
            log(f"cannot read the token file: {err}")
            return USAGE

    base = args.url.rstrip("/")
    body = {"permits": args.permits, "timeout_ms": args.timeout_ms, "ttl_ms": args.ttl_ms}
    if args.capacity is not None:
        body["capacity"] = args.capacity
    if args.owner:
        body["owner"] = args.owner
    name = urllib.parse.quote(args.semaphore, safe="")
    try:
        # Long-poll: the answer comes when the permit is granted or the timeout passes.
        status, permit, headers = call(
            "POST", f"{base}/v1/semaphores/{name}/permits", body, timeout=args.timeout_ms / 1000 + 10
        )
    except Unreachable as err:
        log(f"sidecar {base} unreachable: {err}")
        return UNAVAILABLE
    if status == 429:
        log(f"no permit within {args.timeout_ms} ms; retry after {headers.get('Retry-After', '?')} s")
        return TIMEOUT
    if status != 201:
        log(f"acquire answered {status}: {permit.get('detail', permit)}")
        return UNAVAILABLE if status >= 500 else USAGE
    log(f"holding {permit['permits']} permit(s) of {permit['semaphore']}, fencing token {permit['fencing_token']}")

    env = dict(os.environ)
    env.update(
        CLUSTERLIMIT_SEMAPHORE=permit["semaphore"],
        CLUSTERLIMIT_FENCING_TOKEN=str(permit["fencing_token"]),
        CLUSTERLIMIT_PERMITS=str(permit["permits"]),
        CLUSTERLIMIT_PERMIT_ID=permit["id"],
    )
    try:
        child = subprocess.Popen(command, env=env)
    except OSError as err:
        log(f"cannot run {command[0]}: {err}")
        call_quietly("DELETE", f"{base}/v1/permits/{permit['id']}")
        return 127 if isinstance(err, FileNotFoundError) else 126

    def stop_child():
        child.send_signal(signal.SIGTERM)
        killer = threading.Timer(args.grace, lambda: child.poll() is None and child.kill())
        killer.daemon = True  # must not keep us alive once the child is gone
        killer.start()

    keeper = KeepAlive(base, permit["id"], permit["ttl_ms"], stop_child)
    keeper.start()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    keeper.stop.set()
    keeper.join()
    call_quietly("DELETE", f"{base}/v1/permits/{permit['id']}")  # 404 if it expired: fine
    if keeper.lost.is_set():
        return LOST
    return 128 - code if code < 0 else code


def call_quietly(method, url):
    try:
        call(method, url, timeout=5)
    except Unreachable:
        pass  # the client TTL releases it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
