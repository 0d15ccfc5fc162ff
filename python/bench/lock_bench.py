"""dlm-python lock benchmark, on the peer harness contract (../../../shared/bench-peers/README.md):

    python lock_bench.py <asyncio|threads> <distinct|contended> <concurrency> <secs> [redis_url] [warmup_secs]

asyncio: C asyncio tasks sharing one `dlm.AsyncClient`   -> impl "dlm-python-asyncio"
threads: C OS threads sharing one sync `dlm.Client`      -> impl "dlm-python-threads"

distinct : each worker loops acquire(random key bench:lock:<0..1e6>, ttl 30 s) -> release.
contended: every worker loops on the one key bench:lock:contended. dlm waits its own way (woken on
           release, `wait=` WAIT_S) instead of the harness's retry loop, as the contract allows; a
           `dlm.Busy` (not acquired in WAIT_S) counts as a failed attempt and the worker loops.
           While holding, the worker checks an in-process counter is exactly 1 (else violations++)
           and yields to the scheduler, like the peers.
One JSON line on stdout: impl mode concurrency ops secs ops_per_s p50_us p99_us attempts
failed_attempts errors violations (+ "dlm_version").
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import threading
import time

import dlm

# Profiling knob (default: Python's own 5 ms): DLM_BENCH_SWITCH_INTERVAL=0.0005 makes the thread that
# holds the GIL hand it over sooner, e.g. to the runtime's threads that finish asyncio calls.
if os.environ.get("DLM_BENCH_SWITCH_INTERVAL"):
    sys.setswitchinterval(float(os.environ["DLM_BENCH_SWITCH_INTERVAL"]))

TTL_S = 30.0
WAIT_S = 5.0  # contended mode: dlm's own wait (woken on release)
how = sys.argv[1] if len(sys.argv) > 1 else "asyncio"
mode = sys.argv[2] if len(sys.argv) > 2 else "distinct"
conc = int(sys.argv[3]) if len(sys.argv) > 3 else 1
secs = float(sys.argv[4]) if len(sys.argv) > 4 else 10.0
url = sys.argv[5] if len(sys.argv) > 5 else "redis://127.0.0.1:6390/0"
warm = float(sys.argv[6]) if len(sys.argv) > 6 else 1.0
assert how in ("asyncio", "threads"), how
assert mode in ("distinct", "contended"), mode
now = time.perf_counter
contended = mode == "contended"
LOCK_KW = dict(ttl=TTL_S, watchdog=False)
if contended:
    LOCK_KW["wait"] = WAIT_S


def key() -> str:
    return f"bench:lock:{random.randrange(1_000_000)}" if not contended else "bench:lock:contended"


class Stats:
    def __init__(self) -> None:
        self.lat: list[int] = []
        self.attempts = self.failed = self.errors = self.violations = 0
        self.inside = 0
        self.mu = threading.Lock()


def report(st: Stats) -> None:
    lat = sorted(st.lat)
    pct = lambda p: lat[min(len(lat) - 1, int(len(lat) * p))] if lat else 0  # noqa: E731
    print(json.dumps({
        "impl": f"dlm-python-{how}", "mode": mode, "concurrency": conc, "ops": len(lat), "secs": secs,
        "ops_per_s": round(len(lat) / secs), "p50_us": pct(0.5), "p99_us": pct(0.99),
        "attempts": st.attempts, "failed_attempts": st.failed, "errors": st.errors,
        "violations": st.violations, "dlm_version": getattr(dlm, "__version__", "?"),
    }), flush=True)


async def run_async() -> None:
    ac = await dlm.AsyncClient.connect(url)
    async with ac.lock("bench:warmup", ttl=TTL_S):
        pass
    st = Stats()
    t0 = now()
    m_start, m_end = t0 + warm, t0 + warm + secs

    async def worker() -> None:
        lat = []
        while True:
            s = now()
            if s >= m_end:
                break
            measuring = s >= m_start
            st.attempts += measuring
            try:
                async with ac.lock(key(), **LOCK_KW):
                    if contended:
                        st.inside += 1
                        if st.inside != 1:
                            st.violations += 1
                        await asyncio.sleep(0)
                        st.inside -= 1
            except dlm.Busy:
                st.failed += measuring
                await asyncio.sleep(0)
                continue
            except Exception:  # noqa: BLE001 - counted, the bench goes on
                st.errors += measuring
                await asyncio.sleep(0)
                continue
            e = now()
            if measuring and e <= m_end:
                lat.append(int((e - s) * 1e6))
        st.lat.extend(lat)

    await asyncio.gather(*(worker() for _ in range(conc)))
    close = getattr(ac, "close", None) or getattr(ac, "aclose", None)
    if close is not None:
        r = close()
        if asyncio.iscoroutine(r):
            await r
    report(st)


def run_threads() -> None:
    c = dlm.Client(url)
    with c.lock("bench:warmup", ttl=TTL_S):
        pass
    st = Stats()
    t0 = now()
    m_start, m_end = t0 + warm, t0 + warm + secs

    def worker() -> None:
        lat = []
        a = f = er = 0
        while True:
            s = now()
            if s >= m_end:
                break
            measuring = s >= m_start
            a += measuring
            try:
                with c.lock(key(), **LOCK_KW):
                    if contended:
                        with st.mu:
                            st.inside += 1
                            if st.inside != 1:
                                st.violations += 1
                        time.sleep(0)  # let another thread run while "holding"
                        with st.mu:
                            st.inside -= 1
            except dlm.Busy:
                f += measuring
                time.sleep(0)
                continue
            except Exception:  # noqa: BLE001
                er += measuring
                time.sleep(0)
                continue
            e = now()
            if measuring and e <= m_end:
                lat.append(int((e - s) * 1e6))
        with st.mu:
            st.lat.extend(lat)
            st.attempts += a
            st.failed += f
            st.errors += er

    ts = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    report(st)


if how == "asyncio":
    asyncio.run(run_async())
else:
    run_threads()
