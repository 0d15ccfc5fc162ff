"""A sharded queue from Python (issue 35): configure(shards=K, drain=...),
push(shard_key=...), shards(), shard_stats(), and a worker that drains every
shard; the sync and the async handle. The binding only passes these through."""

from __future__ import annotations

import asyncio
import threading

import pytest

import dlm


def test_shards_configure_push_stats_and_drain(redis_url: str) -> None:
    c = dlm.Client(redis_url)
    q = c.queue("clicks")
    plain = q.shards()
    assert (plain["k"], plain["version"], plain["draining"]) == (1, 0, None)
    assert [(s["index"], s["tag"]) for s in plain["shards"]] == [(0, "clicks")]
    assert set(plain) == {"k", "version", "draining", "shards"}
    assert set(plain["shards"][0]) == {"index", "tag", "slot", "master"}
    assert plain["shards"][0]["master"] is None  # one server: no Cluster master
    assert q.configure(shards=4)["shards"] == 4
    assert q.settings()["shards"] == 4
    layout = q.shards()
    assert (layout["k"], layout["version"], layout["draining"]) == (4, 1, None)
    assert [s["index"] for s in layout["shards"]] == [0, 1, 2, 3]
    assert [s["tag"] for s in layout["shards"]] == ["clicks", "clicks#1", "clicks#2", "clicks#3"]
    assert all(0 <= s["slot"] < 16384 for s in layout["shards"])

    for i in range(40):
        assert q.push(f"t{i}") is True
    before = q.shard_stats()
    assert len(before) == 4
    assert sum(s["waiting"] for s in before) == 40 == q.stats()["waiting"]
    assert all(s["waiting"] > 0 for s in before)

    # One shard key, one shard; de-dup by id among them.
    for i in range(10):
        assert q.push(f"o{i}", shard_key="customer:1") is True
    assert q.push("o0", shard_key="customer:1") is False
    after = q.shard_stats()
    assert sorted(b["waiting"] - a["waiting"] for a, b in zip(before, after)) == [0, 0, 0, 10]
    # A group is its tasks' shard key: another key beside it is refused.
    with pytest.raises(dlm.InvalidArgument):
        q.push("g", group="G", shard_key="other")

    # Out of range, and a lowering that would lose tasks: refused, no change.
    for k in (0, 65):
        with pytest.raises(dlm.InvalidArgument):
            q.configure(shards=k)
    with pytest.raises(dlm.InvalidArgument, match="would lose tasks"):
        q.configure(shards=2)
    assert q.shards()["k"] == 4

    # A drain: new tasks go to the kept shards; a worker empties them all.
    assert q.configure(shards=2, drain=True)["shards"] == 2
    layout = q.shards()
    assert (layout["k"], layout["draining"], len(layout["shards"])) == (2, 4, 4)
    done: list[str] = []
    lock = threading.Lock()

    def handler(task: dlm.Task) -> None:
        with lock:
            done.append(task.id)

    report = q.work(handler, concurrency=2, stop_when_idle=True)
    assert report["acked"] == 50
    assert sorted(done) == sorted([f"t{i}" for i in range(40)] + [f"o{i}" for i in range(10)])
    # The same call again finishes the drain.
    assert q.configure(shards=2)["shards"] == 2
    layout = q.shards()
    assert (layout["k"], layout["draining"], len(layout["shards"])) == (2, None, 2)
    assert len(q.shard_stats()) == 2


def test_async_queue_shards(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        q = ac.queue("aclicks")
        assert (await q.configure(shards=3))["shards"] == 3
        layout = await q.shards()
        assert layout["k"] == 3 and len(layout["shards"]) == 3
        for i in range(6):
            await q.push(f"a{i}", shard_key="k")
        per = await q.shard_stats()
        assert sorted(s["waiting"] for s in per) == [0, 0, 6]
        with pytest.raises(dlm.InvalidArgument):
            await q.configure(shards=1)
        assert (await q.configure(shards=1, drain=True))["shards"] == 1
        assert (await q.shards())["draining"] == 3

    asyncio.run(main())
