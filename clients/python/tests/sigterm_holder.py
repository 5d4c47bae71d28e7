"""Holds a permit until SIGTERM ends it (run by test_signals.py as a subprocess).

    python sigterm_holder.py URL NAME plain|chained|async

``chained`` installs a handler of its own first (it prints and exits 3), which the client's
handler must call after releasing; ``async`` holds the permit with ``AsyncClient``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from types import FrameType
from typing import Optional

from clusterlimit import AsyncClient, Client

# The test sends SIGTERM within seconds; this bounds the process if it never comes.
HOLD_AT_MOST = 60.0


def previous(signum: int, frame: Optional[FrameType]) -> None:
    print("previous handler ran", flush=True)
    sys.exit(3)


def hold_sync(url: str, name: str) -> None:
    with Client(url) as c, c.permit(name, capacity=1, ttl=60.0) as p:
        print(f"held {p.fencing_token}", flush=True)
        time.sleep(HOLD_AT_MOST)


async def hold_async(url: str, name: str) -> None:
    async with AsyncClient(url) as c, c.permit(name, capacity=1, ttl=60.0) as p:
        print(f"held {p.fencing_token}", flush=True)
        await asyncio.sleep(HOLD_AT_MOST)


def main() -> None:
    url, name, mode = sys.argv[1:4]
    if mode == "chained":
        signal.signal(signal.SIGTERM, previous)
    if mode == "async":
        asyncio.run(hold_async(url, name))
    else:
        hold_sync(url, name)


if __name__ == "__main__":
    main()
