"""A reservation (sync): an estimate taken now, settled at the real cost later."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Optional, Type

from . import _wire
from ._transport import SyncTransport
from .errors import ClusterlimitError
from .models import Balance, Reserved

log = logging.getLogger("clusterlimit")


class Reservation:
    """An admitted reservation: ``info`` holds the answer (estimate, remaining, id).

    ``settle(actual)`` gives back what the work did not use or charges what it used beyond,
    into debt if need be; ``keep()`` settles it at its estimate. As a context manager it
    keeps the estimate on exit unless settled in the block.
    """

    def __init__(self, transport: SyncTransport, info: Reserved) -> None:
        self.info = info
        self.id = info.id
        self.settled = False
        self._t = transport

    def __repr__(self) -> str:
        i = self.info
        return f"Reservation(name={i.name!r}, key={i.key!r}, estimate={i.estimate})"

    def __enter__(self) -> "Reservation":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self.settled:
            return
        try:
            self.keep()
        except ClusterlimitError as err:
            if exc is None:
                raise
            log.warning("clusterlimit: keeping reservation %s failed: %s", self.id, err)

    def settle(self, actual: int) -> Balance:
        """Settles at ``actual`` units; the key's balance after."""
        body = self._t.send(_wire.settle(self.info.name, self.id, actual))
        self.settled = True
        return Balance.from_json(body)

    def keep(self) -> Balance:
        """Settles at the estimate (the work used it all, or nobody knows); the balance after."""
        body = self._t.send(_wire.keep(self.info.name, self.id))
        self.settled = True
        return Balance.from_json(body)
