"""Queue benchmark from Python: N no-op tasks enqueued, then processed, with dlm, arq or RQ.

    python queue_bench.py <dlm|dlm-asyncio|arq|rq|rq-fork> <tasks> <redis_url> [concurrency]

dlm         : sync `dlm.Client`; `q.push(id)` per task (or the package's batch push when it has one),
              then `q.work(noop, concurrency=C, stop_when_idle=True)`.
dlm-asyncio : the same on `dlm.AsyncClient` (pushes awaited in chunks of 1000 with gather).
arq         : `enqueue_job` awaited in chunks of 1000 with gather (arq has no batch enqueue), then an
              arq `Worker(burst=True, max_jobs=C)`; other settings arq's defaults (keep_result 3600 s,
              poll_delay 0.5 s).
rq          : `Queue.enqueue_many` (one pipeline per 1000), then one `SimpleWorker.work(burst=True)`:
              the job runs in the worker process, no fork per job. RQ's default `Worker` forks a
              child for every job, which costs milliseconds per no-op and would measure fork(), not
              the queue; `rq-fork` runs that default for reference. An RQ worker runs one job at a
              time (no in-process concurrency), so C does not apply to it.
Prints one JSON line per phase: {"impl","phase","tasks","secs","tasks_per_s"} plus
"redis_cpu_us_per_task" when $REDIS_PID names the redis-server (its utime+stime from /proc over the
phase, divided by the tasks) and "left" (process phase: tasks not processed, from the library's own
counters where it has them).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _noop import anoop, noop  # noqa: E402

logging.disable(logging.CRITICAL)
impl = sys.argv[1]
N = int(sys.argv[2])
url = sys.argv[3]
C = int(sys.argv[4]) if len(sys.argv) > 4 else 64
REDIS_PID = os.environ.get("REDIS_PID")
CLK = os.sysconf("SC_CLK_TCK")
now = time.perf_counter


def redis_cpu() -> float:
    if not REDIS_PID:
        return 0.0
    with open(f"/proc/{REDIS_PID}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK  # utime, stime (fields 14, 15 of stat)


class Phase:
    def __init__(self, name: str, phase: str, **extra):
        self.name, self.phase, self.extra = name, phase, extra

    def __enter__(self):
        self.c0, self.t0 = redis_cpu(), now()
        return self

    def __exit__(self, *exc):
        if exc[0] is not None:
            return False
        secs = now() - self.t0
        d = {"impl": self.name, "phase": self.phase, "tasks": N, "secs": round(secs, 3),
             "tasks_per_s": round(N / secs)}
        if REDIS_PID:
            d["redis_cpu_us_per_task"] = round(1e6 * (redis_cpu() - self.c0) / N, 2)
        d.update(self.extra)
        print(json.dumps(d), flush=True)
        return False


def ids():
    return [f"t{i}" for i in range(N)]


# ------------------------------------------------------------------------------------------- dlm
def run_dlm() -> None:
    import dlm
    name = f"dlm-python-{getattr(dlm, '__version__', '?')}"
    c = dlm.Client(url)
    q = c.queue("bench")
    batch = getattr(q, "push_many", None) or getattr(q, "push_batch", None)
    with Phase(name, "enqueue", how="push_many" if batch else "push loop"):
        if batch:
            for i in range(0, N, 1000):
                batch([f"t{j}" for j in range(i, min(N, i + 1000))])
        else:
            for t in ids():
                q.push(t)
    ph = Phase(name, "process", concurrency=C)
    with ph:
        q.work(noop, concurrency=C, stop_when_idle=True)
    st = q.stats()
    left = sum(int(st.get(k, 0)) for k in ("waiting", "delayed", "in_flight", "dead"))
    print(json.dumps({"impl": name, "phase": "check", "stats": st, "left": left}), flush=True)


def run_dlm_async() -> None:
    import dlm

    async def main():
        name = f"dlm-python-asyncio-{getattr(dlm, '__version__', '?')}"
        ac = await dlm.AsyncClient.connect(url)
        q = ac.queue("bench")
        batch = getattr(q, "push_many", None) or getattr(q, "push_batch", None)
        with Phase(name, "enqueue", how="push_many" if batch else "push gather/1000"):
            for i in range(0, N, 1000):
                chunk = [f"t{j}" for j in range(i, min(N, i + 1000))]
                if batch:
                    await batch(chunk)
                else:
                    await asyncio.gather(*(q.push(t) for t in chunk))

        async def anoop1(_task):
            return None

        with Phase(name, "process", concurrency=C):
            await q.work(anoop1, concurrency=C, stop_when_idle=True)
        st = await q.stats()
        left = sum(int(st.get(k, 0)) for k in ("waiting", "delayed", "in_flight", "dead"))
        print(json.dumps({"impl": name, "phase": "check", "stats": st, "left": left}), flush=True)

    asyncio.run(main())


# ------------------------------------------------------------------------------------------- arq
def run_arq() -> None:
    from importlib.metadata import version

    from arq import create_pool
    from arq.connections import RedisSettings
    from arq.worker import Worker

    name = f"arq-{version('arq')}"
    settings = RedisSettings.from_dsn(url)

    async def main():
        pool = await create_pool(settings)
        with Phase(name, "enqueue", how="enqueue_job gather/1000"):
            for i in range(0, N, 1000):
                await asyncio.gather(*(pool.enqueue_job("anoop") for _ in range(i, min(N, i + 1000))))
        w = Worker(functions=[anoop], redis_pool=pool, burst=True, max_jobs=C, handle_signals=False)
        with Phase(name, "process", concurrency=C):
            await w.async_run()
        print(json.dumps({"impl": name, "phase": "check", "complete": w.jobs_complete,
                          "failed": w.jobs_failed, "left": N - w.jobs_complete}), flush=True)
        await w.close()

    asyncio.run(main())


# -------------------------------------------------------------------------------------------- rq
def run_rq(fork: bool) -> None:
    from importlib.metadata import version

    from redis import Redis
    from rq import Queue, SimpleWorker, Worker

    name = f"rq-{version('rq')}-" + ("Worker-fork" if fork else "SimpleWorker")
    r = Redis.from_url(url)
    q = Queue("bench", connection=r)
    with Phase(name, "enqueue", how="enqueue_many/1000"):
        for i in range(0, N, 1000):
            q.enqueue_many([Queue.prepare_data(noop) for _ in range(i, min(N, i + 1000))])
    w = (Worker if fork else SimpleWorker)([q], connection=r)
    with Phase(name, "process", concurrency=1):
        w.work(burst=True, logging_level="ERROR")
    done = q.finished_job_registry.count
    print(json.dumps({"impl": name, "phase": "check", "complete": done,
                      "failed": q.failed_job_registry.count, "waiting": q.count, "left": N - done}),
          flush=True)


{"dlm": run_dlm, "dlm-asyncio": run_dlm_async, "arq": run_arq,
 "rq": lambda: run_rq(False), "rq-fork": lambda: run_rq(True)}[impl]()
