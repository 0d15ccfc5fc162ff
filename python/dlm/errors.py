"""The exceptions of dlm: one hierarchy under :class:`dlm.Error`, one class per
``dlm::Error`` variant of the Rust core (``Error::Auth`` is
``AuthenticationError``), plus the binding's own: ``StateError`` (misuse of a
guard, handle, lease or closed client) and the outcomes of
``Queue.wait_result`` (``TaskFailed``, ``NotFound``, ``ResultTimeout``). The
native module raises them with the core's message and the variant's fields as
attributes."""

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
    "StateError",
    "ConnectionError",
    "Timeout",
    "RedisError",
    "AuthenticationError",
    "NotFound",
    "TaskFailed",
    "ResultTimeout",
]


class Error(Exception):
    """Base class of every dlm error."""

    name: Optional[str]


class Busy(Error):
    """The lock is held by another owner (after waiting, if a wait was asked
    for). ``ttl``: the holder's remaining lease in seconds, or None when it
    is not known (every ``Busy`` has it; a semaphore's ``NoPermits`` has
    None)."""

    ttl: Optional[float] = None


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
    """An argument is out of range, malformed or of the wrong type (``arg``:
    its name, ``reason``); nothing was written to Redis. Negative or
    oversized integers and payloads that are not bytes-like or ``str`` are
    this too (never ``OverflowError`` or ``TypeError``)."""

    arg: str
    reason: str


class StateError(Error, RuntimeError):
    """A call the object's state does not allow, as the message says:
    releasing a guard twice, releasing through a handle that holds nothing
    for this thread (or asyncio task), acquiring again through a handle
    this thread already holds, using a closed client, using in a forked
    child a client made before the fork (make a new one in the child). A bug in the calling
    code, not a condition to retry (``name``: the lock or client)."""

    name: Optional[str] = None


class ConnectionError(Error, builtins.ConnectionError):
    """Redis could not be reached (refused, dropped, I/O error)."""


class Timeout(ConnectionError, builtins.TimeoutError):
    """Redis did not answer within the client's timeout (``after`` seconds),
    or a connection could not be made in time (a silent server)."""

    after: float


class RedisError(Error):
    """Redis answered with an error (wrong type, a script error, ...)."""


class AuthenticationError(RedisError):
    """Redis refused the credentials (a wrong password or user, or none
    where the server needs them). Not a ``ConnectionError``: retrying
    cannot help, the configuration must change."""


class NotFound(Error, LookupError):
    """No task ``id`` is known to the queue: it never existed, was
    cancelled, or completed and was forgotten (see ``keep_completed``)."""

    id: str


class TaskFailed(Error):
    """The task died: it failed ``max_attempts`` times and is in the dead
    letters (``id``, ``error``: its last error text)."""

    id: str
    error: Optional[str]


class ResultTimeout(Error, builtins.TimeoutError):
    """The task did not finish within the wait (``id``; ``state``: where it
    is now, e.g. ``"waiting"`` or ``"in_flight"``). Not a ``Timeout``:
    Redis answered, the task is just not done."""

    id: str
    state: str
