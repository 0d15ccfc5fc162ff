"""The exceptions of dlm: one hierarchy under :class:`dlm.Error`, one class per
``dlm::Error`` variant of the Rust core. The native module raises them with the
core's message and the variant's fields as attributes."""

import builtins
from typing import Optional

__all__ = [
    "Error",
    "Busy",
    "NoPermits",
    "Expired",
    "NotHeld",
    "Lost",
    "LeaseLost",
    "Conflict",
    "RateLimited",
    "StaleFence",
    "NotReplicated",
    "NoQuorum",
    "QueueFull",
    "UpgradeRefused",
    "InvalidArgument",
    "ConnectionError",
    "Timeout",
    "RedisError",
]


class Error(Exception):
    """Base class of every dlm error."""

    name: Optional[str]


class Busy(Error):
    """The lock is held by another owner (after waiting, if a wait was asked
    for). ``ttl``: the holder's remaining lease in seconds, or None."""

    ttl: Optional[float]


class NoPermits(Busy):
    """Not enough permits of a semaphore were free in time (``wanted``,
    ``free``, ``capacity``)."""

    wanted: int
    free: int
    capacity: int


class Expired(Error):
    """Our lock is gone: its TTL ran out (nobody else holds it now)."""


class NotHeld(Error):
    """Our lock expired and somebody else holds it now."""


class Lost(Error):
    """The lock was lost while the guarded work was running."""


class LeaseLost(Error):
    """A task's lease is gone (``queue``, ``id``; ``taken``: another worker
    holds it)."""

    queue: str
    id: str
    taken: bool


class Conflict(Error):
    """A versioned write found another version (``expected``, ``current``)."""

    expected: int
    current: int


class RateLimited(Error):
    """A rate limiter had no free slot in time (``retry_after`` seconds)."""

    retry_after: float


class StaleFence(Error):
    """A fenced write carried a lower fencing token than one already seen
    (``given``, ``highest``)."""

    given: int
    highest: int


class NotReplicated(Error):
    """The grant reached fewer replicas than asked for; it was released."""

    replicas: int
    wanted: int


class NoQuorum(Error):
    """Redlock: fewer than a majority of the nodes answered (``answered``,
    ``needed``, ``nodes``)."""

    answered: int
    needed: int
    nodes: int


class QueueFull(Error):
    """A fair lock's queue of waiters is full (``max``)."""

    max: int


class UpgradeRefused(Error):
    """A read share cannot be upgraded to the write lock."""


class InvalidArgument(Error, ValueError):
    """An argument is out of range or malformed (``arg``, ``reason``);
    nothing was written to Redis."""

    arg: str
    reason: str


class ConnectionError(Error, builtins.ConnectionError):
    """Redis could not be reached (refused, dropped, I/O error)."""


class Timeout(ConnectionError, builtins.TimeoutError):
    """Redis did not answer within the client's timeout (``after`` seconds)."""

    after: float


class RedisError(Error):
    """Redis answered with an error (wrong password, wrong type, ...)."""
