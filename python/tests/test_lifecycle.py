"""Issue 33: the worker's lifecycle. However a worker stops (cancel, Ctrl-C twice, SIGTERM, stop(),
an event, SystemExit in a handler) its leases go back to the queue; a fork never hangs; a handler
that is no callable is refused before anything is claimed; a result that can never be stored kills
its task at once.

Every wait here has a generous deadline (the machine is shared): a hang fails the test, a slow run
does not."""

from __future__ import annotations

import asyncio
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

import dlm

LONG = 60.0  # the most any step may take before it counts as a hang


def wait_until(cond: Callable[[], bool], what: str, deadline: float = LONG) -> None:
    end = time.monotonic() + deadline
    while not cond():
        if time.monotonic() > end:
            raise AssertionError(f"not within {deadline} s: {what}")
        time.sleep(0.1)


def back_in_queue(q: dlm.Queue) -> Callable[[], bool]:
    def check() -> bool:
        st = q.stats()
        return st["in_flight"] == 0 and st["waiting"] == 1

    return check


# Defect 1: a cancelled or hard-stopped worker keeps renewing its leases.


def test_cancelled_async_worker_gives_its_lease_back(redis_url: str) -> None:
    q = dlm.Client(redis_url).queue("cancelled")
    q.push("slow", b"x")

    async def main() -> dict[str, Any]:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("cancelled")
        started = asyncio.Event()

        async def slow(task: dlm.Task) -> None:
            started.set()
            await asyncio.sleep(30)

        w = asyncio.ensure_future(aq.work(slow, lease=1.0))
        await asyncio.wait_for(started.wait(), LONG)
        w.cancel()
        with pytest.raises(asyncio.CancelledError):
            await w
        await asyncio.to_thread(wait_until, back_in_queue(q), "the cancelled worker's task is given back")

        async def quick(task: dlm.Task) -> bytes:
            return b"done"

        # A second worker drains the queue and ends (it never ended while the lease was renewed).
        report: dict[str, Any] = dict(await asyncio.wait_for(aq.work(quick, stop_when_idle=True), LONG))
        return report

    report = asyncio.run(main())
    assert report["acked"] == 1
    assert q.result("slow") == b"done"


def child(code: str, tmp_path: Path) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )


def stop_child(p: "subprocess.Popen[str]") -> None:
    if p.poll() is None:
        p.kill()
        p.wait(timeout=30)


def test_double_ctrl_c_gives_the_lease_back(redis_url: str, tmp_path: Path) -> None:
    q = dlm.Client(redis_url).queue("ctrl-c-twice")
    q.push("slow", b"x")
    p = child(
        f"""
        import signal, time, dlm
        signal.signal(signal.SIGINT, signal.default_int_handler)
        q = dlm.Client({redis_url!r}).queue("ctrl-c-twice")
        def slow(task):
            print("started", flush=True)
            time.sleep(30)
        try:
            q.work(slow, lease=1.0, grace=30.0)
        except KeyboardInterrupt:
            print("stopped", flush=True)
        time.sleep(120)  # the process lives on: its leases must not
        """,
        tmp_path,
    )
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "started"
        p.send_signal(signal.SIGINT)
        time.sleep(0.5)
        p.send_signal(signal.SIGINT)
        assert p.stdout.readline().strip() == "stopped"
        wait_until(back_in_queue(q), "the interrupted worker's task is given back")
    finally:
        stop_child(p)


# Defect 2: forking after the first call hung for ever.

FORK_SCRIPT = """
import asyncio, multiprocessing as mp, os, sys
import dlm

URL, METHOD = sys.argv[1], sys.argv[2]
OLD = None


async def with_new_async_client(url: str) -> None:
    ac = await dlm.AsyncClient.connect(url)
    async with ac.lock("forked-async-lock", ttl=5.0):
        assert (await ac.queue("forked").stats())["waiting"] >= 1


def with_new_client(url: str) -> None:
    c = dlm.Client(url)
    c.queue("forked").push(f"child-{os.getpid()}")
    with c.lock("forked-lock", ttl=5.0):
        pass
    asyncio.run(with_new_async_client(url))


def with_old_client() -> None:
    try:
        assert OLD is not None
        OLD.queue("forked").stats()
    except dlm.Error as e:
        print("old client:", type(e).__name__, e, flush=True)
        # A state error (the client is the parent's), not a bad argument, naming the cause
        # and the way out.
        ok = (isinstance(e, dlm.StateError) and not isinstance(e, dlm.InvalidArgument)
              and getattr(e, "name", None) == "client"
              and "before a fork" in str(e) and "new client in the child" in str(e))
        sys.exit(0 if ok else 3)
    sys.exit(4)


if __name__ == "__main__":
    OLD = dlm.Client(URL)
    OLD.queue("forked").push("parent")  # the runtime and a connection exist before the fork
    asyncio.run(with_new_async_client(URL))  # and an event loop's bridge
    if METHOD == "os.fork":
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                with_new_client(URL)
            except BaseException as e:
                print("child failed:", repr(e), flush=True)
                code = 5
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        pid = os.fork()
        if pid == 0:
            try:
                with_old_client()
            except SystemExit as e:
                os._exit(int(e.code or 0))
            os._exit(6)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
    else:
        ctx = mp.get_context(METHOD)
        targets = [(with_new_client, (URL,))]
        if METHOD == "fork":
            targets.append((with_old_client, ()))
        for target, args in targets:
            p = ctx.Process(target=target, args=args)
            p.start()
            p.join(60)
            assert p.exitcode == 0, (target.__name__, p.exitcode)
    OLD.queue("forked").push("parent-after")  # the parent still works
    print("ok", flush=True)
"""


@pytest.mark.parametrize("method", ["fork", "forkserver", "spawn", "os.fork"])
def test_fork_never_hangs(redis_url: str, tmp_path: Path, method: str) -> None:
    script = tmp_path / "forking.py"
    script.write_text(FORK_SCRIPT)
    try:
        out = subprocess.run(
            [sys.executable, str(script), redis_url, method],
            capture_output=True, text=True, timeout=150, cwd=tmp_path,
        )
    except subprocess.TimeoutExpired as e:
        # subprocess.run killed the script; its children are orphans that end on their own
        # (every child of the script has a bounded run or is killed by the kernel with it).
        raise AssertionError(f"{method}: hung ({e.stdout!r})") from None
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert out.stdout.strip().endswith("ok")
    st = dlm.Client(redis_url).queue("forked").stats()
    assert st["waiting"] == 3, st  # parent, the child's, parent-after


# Defect 3: a handler that is no callable dead-lettered every task.


@pytest.mark.parametrize("handler", [None, 42, "handler"])
def test_work_refuses_a_non_callable(redis_url: str, handler: Any) -> None:
    q = dlm.Client(redis_url).queue("no-handler")
    q.push("t", b"x")
    with pytest.raises(TypeError):
        q.work(handler, stop_when_idle=True)

    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("no-handler")
        with pytest.raises(TypeError):
            await aq.work(handler, stop_when_idle=True)

    asyncio.run(main())
    st = q.stats()
    assert (st["waiting"], st["in_flight"], st["dead"], st["failed"]) == (1, 0, 0, 0), st
    info = q.task("t")
    assert info is not None and info["attempts"] == 0


# Defect 4: what can never succeed is not retried; SystemExit and KeyboardInterrupt stop the worker.


@pytest.mark.parametrize(
    "result, says",
    [(42, "int"), (b"x" * (1024 * 1024 + 1), "too large"), ([b"a"], "list")],
    ids=["int", "over-1MiB", "list"],
)
def test_unstorable_result_kills_the_task_at_once(redis_url: str, result: Any, says: str) -> None:
    q = dlm.Client(redis_url).queue("unstorable", max_attempts=5, backoff=(0.0, 0.0))
    q.push("t", b"x")
    calls: list[int] = []

    def handler(task: dlm.Task) -> Any:
        calls.append(task.attempts)
        return result

    report = q.work(handler, stop_when_idle=True)
    assert calls == [1]
    assert report["dead"] == 1 and report["retried"] == 0, report
    dead = q.dead()
    assert dead[0]["id"] == "t" and says in (dead[0]["error"] or ""), dead


@pytest.mark.parametrize("exc", [SystemExit, KeyboardInterrupt])
def test_system_exit_in_a_handler_stops_the_worker(redis_url: str, exc: type) -> None:
    q = dlm.Client(redis_url).queue("exiting", max_attempts=5, backoff=(0.0, 0.0))
    q.push("a", b"x")
    q.push("b", b"y")
    calls: list[str] = []

    def handler(task: dlm.Task) -> None:
        calls.append(task.id)
        raise exc(3) if exc is SystemExit else exc()

    with pytest.raises(exc):
        q.work(handler, concurrency=1, stop_when_idle=True)
    assert len(calls) == 1
    st = q.stats()
    # Given back untried: not a failure, and nothing left in flight.
    assert (st["waiting"], st["in_flight"], st["failed"], st["dead"]) == (2, 0, 0, 0), st


def test_system_exit_in_a_thread_handler_of_an_async_worker(redis_url: str) -> None:
    q = dlm.Client(redis_url).queue("exiting-async")
    q.push("a", b"x")

    def handler(task: dlm.Task) -> None:
        raise SystemExit(3)

    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("exiting-async")
        await asyncio.wait_for(aq.work(handler, stop_when_idle=True), LONG)

    # asyncio lets SystemExit through its tasks and out of the loop, once the worker stopped.
    with pytest.raises(SystemExit):
        asyncio.run(main())
    st = q.stats()
    assert (st["waiting"], st["in_flight"], st["failed"]) == (1, 0, 0), st


# Lifecycle: SIGTERM, stop(), an event, threads, coroutines.


def test_sigterm_stops_a_sync_worker_gracefully(redis_url: str, tmp_path: Path) -> None:
    q = dlm.Client(redis_url).queue("sigterm")
    q.push("slow", b"x")
    q.push("next", b"y")
    p = child(
        f"""
        import time, dlm
        q = dlm.Client({redis_url!r}).queue("sigterm")
        def handle(task):
            print("started", task.id, flush=True)
            time.sleep(1.0)
            return "done"
        try:
            q.work(handle, concurrency=1)
        finally:
            print("finally", flush=True)
        """,
        tmp_path,
    )
    try:
        assert p.stdout is not None
        first = p.stdout.readline().split()[1]
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=LONG)
        assert "finally" in out, (out, err)
        assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
        assert q.result(first) == b"done"
        st = q.stats()
        assert (st["processed"], st["waiting"], st["in_flight"]) == (1, 1, 0), st
    finally:
        stop_child(p)


def test_sigterm_stops_an_async_worker_gracefully(redis_url: str, tmp_path: Path) -> None:
    q = dlm.Client(redis_url).queue("sigterm-async")
    q.push("slow", b"x")
    q.push("next", b"y")
    p = child(
        f"""
        import asyncio, dlm
        async def main():
            aq = (await dlm.AsyncClient.connect({redis_url!r})).queue("sigterm-async")
            async def handle(task):
                print("started", task.id, flush=True)
                await asyncio.sleep(1.0)
                return "done"
            try:
                await aq.work(handle, concurrency=1)
            finally:
                print("finally", flush=True)
        asyncio.run(main())
        """,
        tmp_path,
    )
    try:
        assert p.stdout is not None
        first = p.stdout.readline().split()[1]
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=LONG)
        assert "finally" in out, (out, err)
        assert p.returncode == 128 + signal.SIGTERM, (p.returncode, err)
        assert q.result(first) == b"done"
        st = q.stats()
        assert (st["processed"], st["waiting"], st["in_flight"]) == (1, 1, 0), st
    finally:
        stop_child(p)


def lines_of(p: "subprocess.Popen[str]") -> "queue.Queue[str]":
    """The child's stdout lines, read in a thread (so that a wait for one has a deadline)."""
    out: "queue.Queue[str]" = queue.Queue()

    def read() -> None:
        assert p.stdout is not None
        for line in p.stdout:
            out.put(line.strip())

    threading.Thread(target=read, daemon=True).start()
    return out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_stops_an_async_worker_at_once(
    redis_url: str, tmp_path: Path, signum: int
) -> None:
    """The first SIGTERM or Ctrl-C stops an AsyncQueue.work gracefully (the running handler
    goes on); a second one stops it at once, its task given back, as in Queue.work."""
    name = f"second-signal-{signum}"
    q = dlm.Client(redis_url).queue(name)
    q.push("slow", b"x")
    p = child(
        f"""
        import asyncio, signal, time, dlm
        # Python's own Ctrl-C handler, even when started with SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        async def main():
            aq = (await dlm.AsyncClient.connect({redis_url!r})).queue({name!r})
            async def slow(task):
                print("started", flush=True)
                await asyncio.sleep(60)
            await aq.work(slow, lease=30.0, grace=60.0)
        try:
            asyncio.run(main())
        except BaseException as e:
            print("stopped", type(e).__name__, flush=True)
        time.sleep(120)  # the process lives on: its leases must not
        """,
        tmp_path,
    )
    try:
        lines = lines_of(p)
        assert lines.get(timeout=LONG) == "started"
        p.send_signal(signum)
        time.sleep(1.0)
        # Graceful: the handler runs on, its task leased.
        assert p.poll() is None and lines.empty(), lines.queue
        assert q.stats()["in_flight"] == 1
        t0 = time.monotonic()
        p.send_signal(signum)
        stopped = lines.get(timeout=LONG)
        assert time.monotonic() - t0 < 10.0
        want = "SystemExit" if signum == signal.SIGTERM else "KeyboardInterrupt"
        assert stopped == f"stopped {want}"
        # Given back at once: far sooner than the 30 s lease would run out.
        wait_until(back_in_queue(q), "the stopped worker's task is given back", deadline=10.0)
    finally:
        stop_child(p)


def test_stop_a_worker_in_a_thread(redis_url: str) -> None:
    q = dlm.Client(redis_url).queue("threaded")
    q.push("a", b"x")
    done = threading.Event()
    out: dict[str, Any] = {}

    def handler(task: dlm.Task) -> str:
        done.set()
        return "ok"

    def run() -> None:
        out.update(q.work(handler))

    t = threading.Thread(target=run)
    t.start()
    assert done.wait(LONG)
    q.stop()
    t.join(LONG)
    assert not t.is_alive()
    assert out["acked"] == 1

    # With an event, and from asyncio.to_thread.
    q.push("b", b"y")
    stop = threading.Event()

    def handler2(task: dlm.Task) -> str:
        stop.set()
        return "ok"

    async def main() -> dict[str, Any]:
        r = await asyncio.wait_for(asyncio.to_thread(q.work, handler2, stop=stop), LONG)
        return dict(r)

    assert asyncio.run(main())["acked"] == 1


def test_async_worker_stops_on_an_event_and_on_stop(redis_url: str) -> None:
    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("async-stop")
        await aq.push("a")
        ev = asyncio.Event()

        async def handler(task: dlm.Task) -> None:
            ev.set()

        r = await asyncio.wait_for(aq.work(handler, stop=ev), LONG)
        assert r["acked"] == 1
        await aq.push("b")

        async def handler2(task: dlm.Task) -> None:
            aq.stop()

        r = await asyncio.wait_for(aq.work(handler2), LONG)
        assert r["acked"] == 1

    asyncio.run(main())


def test_sync_handler_of_an_async_worker_runs_in_a_thread(redis_url: str) -> None:
    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("sync-in-async")
        await aq.push("a")
        loop_thread = threading.get_ident()
        from_loop = threading.Event()
        seen: list[int] = []

        def handler(task: dlm.Task) -> str:
            seen.append(threading.get_ident())
            # The loop sets this while the handler runs: it would never, were it blocked.
            return "free" if from_loop.wait(LONG) else "blocked"

        async def poke() -> None:
            while not seen:
                await asyncio.sleep(0.01)
            from_loop.set()

        poker = asyncio.ensure_future(poke())
        r = await asyncio.wait_for(aq.work(handler, stop_when_idle=True), LONG)
        await poker
        assert r["acked"] == 1
        assert seen and seen[0] != loop_thread
        assert await aq.result("a") == b"free"

    asyncio.run(main())


def test_async_methods_are_coroutines(redis_url: str) -> None:
    async def main() -> None:
        ac = await dlm.AsyncClient.connect(redis_url)
        aq = ac.queue("coros")
        call = aq.push("a")
        assert asyncio.iscoroutine(call)
        t = asyncio.create_task(call)
        assert await t is True
        if sys.version_info >= (3, 11):
            async with asyncio.TaskGroup() as tg:
                t1 = tg.create_task(aq.push("b"))
                t2 = tg.create_task(aq.stats())
            assert t1.result() is True and t2.result()["waiting"] >= 1
        assert sorted(await asyncio.gather(aq.push("c"), aq.push("c"))) == [False, True]
        # An error reaches the awaiting code also when the call is a temporary (freed while its
        # exception propagates).
        g = await ac.lock("held", ttl=10.0).acquire()
        with pytest.raises(dlm.Busy):
            await ac.lock("held", ttl=10.0).acquire()
        await g.release()

    asyncio.run(main())


# The handler's context: progress, extend, attempt.


def test_handler_context(redis_url: str) -> None:
    q = dlm.Client(redis_url).queue("context")
    q.push("t", b"x")
    seen: dict[str, Any] = {}

    def handler(task: dlm.Task) -> None:
        task.progress(40, "four of ten")
        seen["progress"] = q.progress(task.id)
        task.extend(120.0)
        seen["deadline"] = q.task(task.id)
        seen["attempt"] = task.attempts

    q.work(handler, stop_when_idle=True, lease=5.0)
    assert seen["progress"] == (40, "four of ten")
    assert seen["attempt"] == 1

    async def main() -> None:
        aq = (await dlm.AsyncClient.connect(redis_url)).queue("context")
        await aq.push("u")

        async def ahandler(task: dlm.Task) -> None:
            await task.aprogress(70, "nearly")
            seen["aprogress"] = await aq.progress(task.id)
            await task.aextend(120.0)

        await asyncio.wait_for(aq.work(ahandler, stop_when_idle=True), LONG)

    asyncio.run(main())
    assert seen["aprogress"] == (70, "nearly")


def test_handler_extend_outlasts_the_heartbeat(redis_url: str, r: Any) -> None:
    """extend() in a worker sets a longer lease that the worker's own renewals do not shorten."""
    q = dlm.Client(redis_url).queue("extended")
    q.push("t", b"x")
    seen: list[float] = []

    def handler(task: dlm.Task) -> None:
        task.extend(300.0)
        time.sleep(2.5)  # several heartbeats of a 1 s lease
        now_ms = time.time() * 1000
        score: Optional[float] = None
        for key in r.keys("*extended*"):
            if r.type(key) == b"zset":
                s = r.zscore(key, "t")
                if s is not None and s > now_ms + 60_000:
                    score = s
        seen.append(score or 0.0)

    q.work(handler, stop_when_idle=True, lease=1.0)
    assert seen and seen[0] > 0, "the lease was shortened again by the worker's renewals"
