"""The Python client on the deployments the README names besides a single server: a Redis
Cluster (`cluster=True`), a master found through Sentinel (`sentinel="mymaster"`), and
`rediss://` with `cacert=` (and mutual TLS with `cert=`/`key=`).

One body runs on every deployment: a lock with a fence, a second owner refused with Busy, the
fence growing on the next acquisition, and a queue round trip with four concurrent handlers.
The servers are started by the fixtures of _topologies.py (free loopback ports, killed by pid).
"""
from __future__ import annotations

import asyncio
import threading

import pytest

import dlm
from _topologies import Deployment, cluster, mtls, pki, sentinel, tls

__all__ = ["cluster", "mtls", "pki", "sentinel", "tls"]  # fixtures used by name

DEPLOYMENTS = ["cluster", "sentinel", "tls", "mtls"]


@pytest.fixture(params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest) -> Deployment:
    d: Deployment = request.getfixturevalue(request.param)
    return d


def connect(d: Deployment) -> dlm.Client:
    return dlm.Client(d.url, timeout=5.0, connect_timeout=5.0, **d.kwargs)


def test_lock_and_queue(deployment: Deployment) -> None:
    c = connect(deployment)
    other = connect(deployment)

    # A lock with a fence; another owner is refused while it is held.
    with c.lock("orders:42", ttl=10.0, wait=2.0) as g:
        assert isinstance(g.fence, int) and g.fence > 0
        assert not g.is_lost()
        with pytest.raises(dlm.Busy) as e:
            other.lock("orders:42", ttl=10.0, wait=0.2).acquire()
        assert e.value.name == "orders:42"
        assert c.lock("orders:42").status()["held"] is True
        first = g.fence
    assert g.is_released()
    # Released: the other owner gets it now, with a larger fence.
    with other.lock("orders:42", ttl=10.0, wait=2.0) as g2:
        assert g2.fence is not None and g2.fence > first

    # A queue round trip with four concurrent handlers.
    q = c.queue(f"jobs-{deployment.name}")
    n = 24
    for i in range(n):
        assert q.push(f"t{i}", f"p{i}".encode())
    assert not q.push("t0", b"again")  # already queued
    seen: list[bytes] = []
    mu = threading.Lock()

    def handler(t: dlm.Task) -> bytes:
        with mu:
            seen.append(t.payload)
        return t.payload.upper()

    report = q.work(handler, concurrency=4, stop_when_idle=True)
    assert report["acked"] == n
    assert report["dead"] == 0 and report["lost"] == 0
    assert sorted(seen) == sorted(f"p{i}".encode() for i in range(n))
    st = q.stats()
    assert st["processed"] == n
    assert st["waiting"] == 0 and st["in_flight"] == 0 and st["dead"] == 0
    assert q.result("t7") == b"P7"


def test_mtls_refuses_client_without_cert(mtls: Deployment) -> None:
    with pytest.raises(dlm.ConnectionError, match=r"(?i)certificate"):
        dlm.Client(mtls.url, cacert=mtls.kwargs["cacert"], timeout=2.0, connect_timeout=2.0).lock(
            "x", ttl=5.0).acquire()


def test_tls_refuses_unknown_ca(tls: Deployment) -> None:
    """Without cacert= the test CA is not trusted: connecting must fail, not fall back."""
    with pytest.raises(dlm.ConnectionError, match=r"(?i)certificate|issuer"):
        dlm.Client(tls.url, timeout=2.0, connect_timeout=2.0).lock("x", ttl=5.0).acquire()


def test_async_cluster(cluster: Deployment) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(cluster.url, timeout=5.0, connect_timeout=5.0, **cluster.kwargs)
        other = await dlm.AsyncClient.connect(cluster.url, cluster=True)
        async with ac.lock("async:orders:42", ttl=10.0, wait=2.0) as g:
            assert isinstance(g.fence, int) and g.fence > 0
            with pytest.raises(dlm.Busy):
                await other.lock("async:orders:42", ttl=10.0, wait=0.2).acquire()
        q = ac.queue("async-jobs")
        n = 12
        for i in range(n):
            assert await q.push(f"a{i}", f"p{i}".encode())

        async def handler(t: dlm.Task) -> bytes:
            await asyncio.sleep(0)
            return t.payload

        report = await q.work(handler, concurrency=4, stop_when_idle=True)
        assert report["acked"] == n
        assert (await q.stats())["processed"] == n
        assert await q.result("a3") == b"p3"

    asyncio.run(main())
