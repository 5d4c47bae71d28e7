"""Releasing held permits on SIGTERM.

Python's default SIGTERM ends the process at once: no ``finally``, no ``with`` exit, so a
permit would stay held until its client TTL ran out. The handler installed here releases
every permit still held (a short DELETE each), then does what the previous disposition
would have done: calls the previous Python handler, ignores the signal if it was ignored,
or else restores the default and sends SIGTERM again, so the process still ends by it.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import weakref
from types import FrameType
from typing import Any, Callable, Optional, Protocol, Union

log = logging.getLogger("clusterlimit")

Handler = Union[Callable[[int, Optional[FrameType]], Any], int, signal.Handlers, None]


class Releasable(Protocol):
    """A held permit that can be released from a signal handler (blocking, bounded)."""

    def _release_on_signal(self) -> None: ...


_held: "weakref.WeakSet[Any]" = weakref.WeakSet()
_previous: Handler = None
_installed = False


def hold(permit: Releasable, install: bool) -> None:
    """Counts ``permit`` as held; installs the handler first if ``install`` and possible."""
    if install:
        install_sigterm_handler()
    _held.add(permit)


def drop(permit: Releasable) -> None:
    """``permit`` is released: the handler has nothing more to do for it."""
    _held.discard(permit)


def install_sigterm_handler() -> bool:
    """Installs the SIGTERM handler that releases held permits, once per process.

    Signal handlers can only be set from the main thread: a program that takes its first
    permit on another thread calls this from the main thread at start. Returns true if the
    handler is installed (now or before).
    """
    global _installed, _previous
    if _installed:
        return True
    if threading.current_thread() is not threading.main_thread():
        log.debug("clusterlimit: SIGTERM handler not installed (not on the main thread)")
        return False
    _previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _on_sigterm)
    _installed = True
    return True


def _on_sigterm(signum: int, frame: Optional[FrameType]) -> None:
    for permit in list(_held):
        try:
            permit._release_on_signal()
        except Exception as err:  # the next permits and the previous handler still run
            log.warning("clusterlimit: on SIGTERM, releasing a permit failed: %s", err)
    _chain(signum, frame)


def _chain(signum: int, frame: Optional[FrameType]) -> None:
    previous = _previous
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_IGN:
        return
    else:  # SIG_DFL, or a handler set outside Python: end the process as it would have
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
