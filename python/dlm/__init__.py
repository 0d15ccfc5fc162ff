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
    AsyncVersioned,
    AsyncStock,
    AsyncRateLimiter,
    AsyncLease,
    AsyncIds,
    AsyncLock,
    AsyncLockGuard,
    AsyncQueue,
    AsyncEventStream,
    Call,
    Client,
    EventStream,
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
    enable_metrics,
    metrics_text,
)
from .observe import serve_metrics
from . import errors as _errors
from .errors import *  # noqa: F403 - the exceptions, as listed in errors.__all__

__all__ = [
    "AsyncClient",
    "AsyncVersioned",
    "AsyncStock",
    "AsyncRateLimiter",
    "AsyncLease",
    "AsyncIds",
    "AsyncLock",
    "AsyncLockGuard",
    "AsyncQueue",
    "AsyncEventStream",
    "Call",
    "Client",
    "EventStream",
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
    "enable_metrics",
    "metrics_text",
    "serve_metrics",
]
__all__ += _errors.__all__
