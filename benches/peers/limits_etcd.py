#!/usr/bin/env python3
"""A worker of the limiter bench's rate rows (issue 17): Python `limits` 4.8.0 on etcd.

    python limits_etcd.py '<WorkerSetup JSON>'   # one WorkerReport JSON line on stdout
    python limits_etcd.py --versions             # one line: Python, limits, etcd3

The protocol is benches/limiter/rate/protocol.rs. 4.8.0 is the last release with an etcd
storage (`etcd://`); on etcd it offers the fixed window only (its moving and sliding windows
need storage methods EtcdStorage lacks), so that is what runs. One storage object per process,
shared by the callers (threads), as one Limiter per process does for clusterlimit.
scripts/test installs the venv that runs this.

Measured with etcd 3.4: each hit grants a lease and makes one or two transactions; concurrent
callers of one key fail its 5 tries (ConcurrentUpdateError) or put with a lease another caller
just revoked ("requested lease not found"): both count as errors in the report.
"""

import json
import os
import random
import sys
import threading
import time

# Most latencies a hot-mode report carries (the protocol's bound).
RESERVOIR = 20_000


def unix_us():
    """Now as Unix µs: the clock every worker of a run shares, whatever its language."""
    return time.time_ns() // 1_000


def versions():
    import etcd3
    import limits

    return "Python {}, limits {}, etcd3 {}".format(
        sys.version.split()[0], limits.__version__, etcd3.__version__
    )


def whole(setup, field, least):
    """The setup's `field`, a whole number >= `least`, or an error naming it."""
    value = setup.get(field)
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ValueError(f"{field} must be a whole number >= {least}, got {value!r}")
    return value


def text(setup, field):
    """The setup's `field`, a non-empty string, or an error naming it."""
    value = setup.get(field)
    if not isinstance(value, str) or not value:
        raise ValueError(f"{field} must be a non-empty string, got {value!r}")
    return value


class Tally:
    """Counts, a uniform reservoir of latencies (algorithm R) and the admitted intervals."""

    def __init__(self, keep):
        self.lock = threading.Lock()
        self.keep = keep
        self.decisions = self.admitted = self.errors = self.seen = 0
        self.latencies = []
        self.admitted_at = []
        self.first_sent = None
        self.last_answered = 0
        self.first_error = None

    def record(self, sent, answered, latency_us, outcome):
        with self.lock:
            self.first_sent = sent if self.first_sent is None else min(self.first_sent, sent)
            self.last_answered = max(self.last_answered, answered)
            if isinstance(outcome, BaseException):
                self.errors += 1
                self.first_error = self.first_error or outcome
                return
            self.decisions += 1
            if outcome:
                self.admitted += 1
                self.admitted_at.append([sent, answered])
            self.seen += 1
            if len(self.latencies) < self.keep:
                self.latencies.append(latency_us)
            else:
                slot = random.randrange(self.seen)
                if slot < self.keep:
                    self.latencies[slot] = latency_us


def one(check, tally):
    sent = unix_us()
    started = time.perf_counter_ns()
    try:
        outcome = check()
    except Exception as e:  # a failed check is counted, not fatal
        outcome = e
    latency_us = (time.perf_counter_ns() - started) // 1_000
    tally.record(sent, unix_us(), latency_us, outcome)


def run(setup):
    from limits import RateLimitItemPerSecond
    from limits.storage import storage_from_string
    from limits.strategies import FixedWindowRateLimiter

    limit = whole(setup, "limit", 1)
    period_ms = whole(setup, "period_ms", 1)
    target, name, key = text(setup, "target"), text(setup, "limit_name"), text(setup, "key")
    start_at, count = whole(setup, "start_at_unix_us", 0), whole(setup, "count", 0)
    callers, duration_ms = whole(setup, "callers", 1), whole(setup, "duration_ms", 0)
    if period_ms % 1000:
        raise ValueError(f"period_ms must be whole seconds for limits, got {period_ms}")
    mode = setup.get("mode")
    if mode not in ("hot", "uncontended"):
        raise ValueError(f"mode must be hot or uncontended, got {mode!r}")
    storage = storage_from_string(target)
    limiter = FixedWindowRateLimiter(storage)
    item = RateLimitItemPerSecond(limit, period_ms // 1000)

    def check():
        return limiter.hit(item, name, key)

    if not storage.check():  # connects before the start
        raise RuntimeError(f"etcd at {target} does not answer")
    wait = start_at - unix_us()
    if wait > 0:
        time.sleep(wait / 1e6)

    tally = Tally(RESERVOIR if mode == "hot" else float("inf"))
    cpu_before = os.times()
    if mode == "uncontended":
        for _ in range(count):
            one(check, tally)
    else:
        end = max(start_at, unix_us()) + duration_ms * 1_000

        def caller():
            while unix_us() < end:
                one(check, tally)

        threads = [threading.Thread(target=caller) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    cpu_after = os.times()
    if tally.first_error is not None:
        print(
            "limits_etcd: {} failed checks, the first: {}".format(
                tally.errors, " ".join(repr(tally.first_error).split())
            ),
            file=sys.stderr,
        )
        if tally.decisions == 0:
            raise RuntimeError(f"no check got a decision: {tally.first_error!r}")
    return {
        "algorithm": "fixed-window",
        "decisions": tally.decisions,
        "admitted": tally.admitted,
        "errors": tally.errors,
        "elapsed_s": (tally.last_answered - (tally.first_sent or 0)) / 1e6,
        "cpu_s": (cpu_after.user - cpu_before.user) + (cpu_after.system - cpu_before.system),
        "latencies_us": tally.latencies,
        "admitted_at_us": tally.admitted_at,
        "store_requests": None,
        "local_denials": None,
    }


def main(args):
    if args == ["--versions"]:
        print(versions())
        return 0
    if len(args) != 1:
        print("usage: limits_etcd.py '<WorkerSetup JSON>' | --versions", file=sys.stderr)
        return 64
    try:
        try:
            setup = json.loads(args[0])
        except ValueError as e:
            raise ValueError(f"bad worker setup {args[0]}: {e}") from None
        print(json.dumps(run(setup)), flush=True)
    except Exception as e:
        print(f"limits_etcd worker failed: {e!r}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
