"""kazoo's Semaphore recipe, measured like clusterlimit in benches/limiter.rs (row 7).

Run by the benchmark with /usr/bin/python3 (Debian's python3-kazoo). Prints one JSON object.

  kazoo_peer.py uncontended --hosts H:P --path /p --iterations N --capacity C
      -> {"samples_ns": [...]}            acquire+release pairs after 20 unmeasured ones
  kazoo_peer.py contended --hosts H:P --path /p --clients 8 --capacity 2 --hold-ms 5 --seconds 10
      -> {"per_client": [...], "all": N, "max_holders": M, "seconds": S}

Contended clients are separate processes (forked before any ZooKeeper client exists), each with
its own KazooClient session, so Python's GIL does not serialize them; they start together at a
barrier and each loops acquire -> hold (time.sleep) -> release until its deadline.
"""

import argparse
import json
import multiprocessing
import sys
import time

from kazoo.client import KazooClient

WARMUP = 20
# Bounds: a healthy acquire takes milliseconds; a stuck one must not hang the benchmark.
ACQUIRE_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 15.0
MAX_ITERATIONS = 10_000_000


def connect(hosts):
    client = KazooClient(hosts=hosts, timeout=10.0)
    client.start(timeout=CONNECT_TIMEOUT_S)
    return client


def uncontended(args):
    client = connect(args.hosts)
    try:
        sem = client.Semaphore(args.path, "bench", max_leases=args.capacity)
        samples = []
        for i in range(WARMUP + args.iterations):
            start = time.perf_counter_ns()
            if not sem.acquire(timeout=ACQUIRE_TIMEOUT_S):
                raise RuntimeError("uncontended acquire timed out")
            sem.release()
            if i >= WARMUP:
                samples.append(time.perf_counter_ns() - start)
        return {"samples_ns": samples}
    finally:
        client.stop()
        client.close()


def contended_client(index, args, barrier, holding, max_holding, counts, totals, errors):
    try:
        client = connect(args.hosts)
    except Exception as e:  # reported by the parent
        errors.put(f"client {index}: connect: {e!r}")
        barrier.abort()
        return
    try:
        sem = client.Semaphore(args.path, f"client-{index}", max_leases=args.capacity)
        barrier.wait(timeout=60)
        deadline = time.monotonic() + args.seconds
        hold = args.hold_ms / 1000.0
        in_run = done = 0
        while time.monotonic() < deadline and done < MAX_ITERATIONS:
            if not sem.acquire(timeout=ACQUIRE_TIMEOUT_S):
                raise RuntimeError("contended acquire timed out")
            # Counted between the grant and the release, as on the Rust side.
            with holding.get_lock():
                holding.value += 1
                if holding.value > max_holding.value:
                    max_holding.value = holding.value
            done += 1
            if time.monotonic() <= deadline:
                in_run += 1
            if hold > 0:
                time.sleep(hold)
            with holding.get_lock():
                holding.value -= 1
            sem.release()
        counts[index] = in_run
        totals[index] = done
    except Exception as e:
        errors.put(f"client {index}: {e!r}")
        barrier.abort()
    finally:
        client.stop()
        client.close()


def contended(args):
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(args.clients)
    holding = ctx.Value("i", 0)
    max_holding = ctx.Value("i", 0)
    counts = ctx.Array("q", args.clients)
    totals = ctx.Array("q", args.clients)
    errors = ctx.Queue()
    procs = [
        ctx.Process(
            target=contended_client,
            args=(i, args, barrier, holding, max_holding, counts, totals, errors),
        )
        for i in range(args.clients)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=args.seconds + 120)
        if p.is_alive():
            p.kill()
            raise RuntimeError("a contended kazoo client did not finish in time")
    if not errors.empty():
        raise RuntimeError(errors.get())
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError("a contended kazoo client failed")
    return {
        "per_client": list(counts),
        "all": sum(totals),
        "max_holders": max_holding.value,
        "seconds": args.seconds,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=["uncontended", "contended"])
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--path", required=True)
    parser.add_argument("--capacity", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--hold-ms", type=float, default=0.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    result = uncontended(args) if args.mode == "uncontended" else contended(args)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
