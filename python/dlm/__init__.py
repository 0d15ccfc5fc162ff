"""dlm: distributed locks (single Redis and Redlock) and a reliable task queue
on Redis, from Python. The work is done by the dlm Rust core; this package is
a thin layer over it (the native module ``dlm._dlm``).

    import dlm
    c = dlm.Client("redis://127.0.0.1:6379")
    with c.lock("orders:42", ttl=10.0, wait=5.0, watchdog=True) as g:
        print(g.fence, g.remaining())
"""

from ._dlm import (
    AsyncClient,
    AsyncLock,
    AsyncLockGuard,
    AsyncQueue,
    Client,
    Ids,
    Lease,
    Lock,
    LockGuard,
    Queue,
    RateLimiter,
    Stock,
    Task,
    Versioned,
    __version__,
)
from .errors import (
    Busy,
    Conflict,
    ConnectionError,
    Error,
    Expired,
    InvalidArgument,
    LeaseLost,
    Lost,
    NoPermits,
    NoQuorum,
    NotHeld,
    NotReplicated,
    QueueFull,
    RateLimited,
    RedisError,
    StaleFence,
    Timeout,
    UpgradeRefused,
)

__all__ = [
    "AsyncClient",
    "AsyncLock",
    "AsyncLockGuard",
    "AsyncQueue",
    "Client",
    "Ids",
    "Lease",
    "Lock",
    "LockGuard",
    "Queue",
    "RateLimiter",
    "Stock",
    "Task",
    "Versioned",
    "__version__",
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
