"""Python client of the clusterlimit sidecar (``clusterlimit serve``).

    from clusterlimit import Client

    limiter = Client("http://127.0.0.1:7878")
    with limiter.permit("exports", capacity=4, timeout=5.0) as p:
        ...  # p.fencing_token; stop when p.lost

See README.md beside this package for the rest: rate checks, reservations, errors, SIGTERM.
"""

from ._lost import LostFlag
from ._signals import install_sigterm_handler
from .aio import AsyncClient, AsyncPermit, AsyncReservation
from .client import Client
from .errors import (
    AcquireTimeout,
    ClusterlimitError,
    Conflict,
    Gone,
    InvalidArgument,
    NotFound,
    OverLimit,
    PermitLost,
    SidecarUnreachable,
    Unauthorized,
    Unavailable,
)
from .models import Balance, Decision, Grant, Reserved
from .permit import Permit
from .reservation import Reservation

__all__ = [
    "AcquireTimeout",
    "AsyncClient",
    "AsyncPermit",
    "AsyncReservation",
    "Balance",
    "Client",
    "ClusterlimitError",
    "Conflict",
    "Decision",
    "Gone",
    "Grant",
    "InvalidArgument",
    "LostFlag",
    "NotFound",
    "OverLimit",
    "Permit",
    "PermitLost",
    "Reservation",
    "Reserved",
    "SidecarUnreachable",
    "Unauthorized",
    "Unavailable",
    "install_sigterm_handler",
]
