"""Draw the scaling curves of `dlm bench curves` (issue 16 section 4) as PNGs.

Usage: python plot-curves.py <dir with *.jsonl> <dir for the PNGs>
Reads locks-concurrency.jsonl, locks-held.jsonl, queue-size.jsonl and queue-workers.jsonl (any
missing file is skipped) and writes curve-locks-concurrency.png, curve-locks-held.png,
curve-queue-size.png and curve-queue-workers.png.
"""
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]


def load(name):
    p = os.path.join(src, name)
    if not os.path.exists(p):
        return []
    return [json.loads(line) for line in open(p) if line.strip()]


def human(v, _pos=None):
    for div, suffix in ((1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            s = f"{v / div:.1f}".rstrip("0").rstrip(".")
            return s + suffix
    return f"{v:g}"


HUMAN = FuncFormatter(human)


def micros(v, _pos=None):
    """A latency given in µs, in the unit that reads best."""
    if v >= 1e6:
        return f"{v / 1e6:.3g} s"
    if v >= 1e3:
        return f"{v / 1e3:.3g} ms"
    return f"{v:g} µs"


MICROS = FuncFormatter(micros)


def headroom(ax, factor=1.15):
    """Room above the highest point for its label (linear y axes)."""
    lo, hi = ax.get_ylim()
    ax.set_ylim(0, hi * factor)


def ticks_at(ax, xs):
    ax.set_xticks(xs)
    ax.xaxis.set_major_formatter(HUMAN)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))


def style(ax, title, xlabel, ylabel, logx=True, logy=False):
    ax.set_title(title, fontsize=11)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.xaxis.set_major_formatter(HUMAN)
    ax.yaxis.set_major_formatter(HUMAN)
    ax.grid(True, which="major", alpha=0.35)
    ax.grid(True, which="minor", alpha=0.12)


def annotate(ax, xs, ys, fmt=human, below=False):
    for x, y in zip(xs, ys):
        if y is not None:
            ax.annotate(fmt(y), (x, y), textcoords="offset points", xytext=(0, -13 if below else 6),
                        ha="center", fontsize=8)


def when(rows):
    """When a curve was measured and the load meanwhile, from its lines' `at` and `load1`
    (older lines without them: machine.txt's)."""
    ats = [r["at"] for r in rows if r.get("at")]
    loads = [r["load1"] for r in rows if r.get("load1") is not None]
    if not ats:
        return machine
    return f"{min(ats)} to {max(ats)}; 1-min load average {min(loads):.1f}-{max(loads):.1f} on the machine"


def save(fig, name, note):
    fig.text(0.01, 0.005, note, fontsize=7, color="#555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path = os.path.join(dst, name)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


machine = ""
mp = os.path.join(src, "machine.txt")
if os.path.exists(mp):
    lines = open(mp).read().splitlines()
    date = lines[0].strip() if lines else ""
    avg = next((l.split("load average:")[1].strip() for l in lines if "load average:" in l), "?")
    machine = f"{date}; load average at start {avg}"

rows = load("locks-concurrency.jsonl")
if rows:
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    for mode, color in (("distinct", "tab:blue"), ("contended", "tab:red")):
        rs = sorted((r for r in rows if r["mode"] == mode), key=lambda r: r["concurrency"])
        if not rs:
            continue
        xs = [r["concurrency"] for r in rs]
        ops = [r["ops_per_s"] for r in rs]
        a.plot(xs, ops, "o-", color=color, label=f"{mode} keys" if mode == "distinct" else "one contended key")
        annotate(a, xs, ops)
        b.plot(xs, [r["p99_us"] for r in rs], "o-", color=color, label=f"{mode} p99")
        b.plot(xs, [r["p50_us"] for r in rs], "o--", color=color, alpha=0.5, label=f"{mode} p50")
    conc = sorted({r["concurrency"] for r in rows})
    style(a, "Lock cycles/s vs concurrent tasks (one client)", "concurrent tasks (log)", "acquire+release cycles/s")
    ticks_at(a, conc)
    headroom(a)
    a.legend()
    style(b, "Cycle latency vs concurrent tasks", "concurrent tasks (log)", "latency of one cycle (log)", logy=True)
    ticks_at(b, conc)
    b.yaxis.set_major_formatter(MICROS)
    b.legend(fontsize=8)
    save(fig, "curve-locks-concurrency.png", f"dlm bench curves --curves concurrency; {when(rows)}")

rows = sorted(load("locks-held.jsonl"), key=lambda r: r["held"])
if rows:
    xs = [r["held"] for r in rows]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.6))
    red = [r["redis_bytes_per_lock"] for r in rows]
    cli = [r["client_rss_bytes_per_lock"] for r in rows]
    a.plot(xs, red, "o-", label="Redis used_memory / lock")
    a.plot(xs, cli, "s-", label="client RSS / held guard")
    annotate(a, xs, red, lambda v: f"{v:.0f} B")
    annotate(a, xs, cli, lambda v: f"{v:.0f} B")
    style(a, "Memory per held lock", "locks held at once (log)", "bytes")
    ticks_at(a, xs)
    headroom(a)
    a.legend(fontsize=8)
    ws = [r["watchdog_scripts_per_s"] for r in rows]
    rn = [r["renewals_per_s"] for r in rows]
    b.plot(xs, ws, "o-", label="watchdog scripts/s (INFO commandstats)")
    b.plot(xs, rn, "^--", alpha=0.6, label="renewals due/s (N / (TTL/3))")
    annotate(b, xs, ws)
    style(b, f"Watchdog load (TTL {rows[0]['ttl_s']:g} s, renew every TTL/3)", "locks held at once (log)", "per second (log)", logy=True)
    ticks_at(b, xs)
    b.legend(fontsize=8)
    cpu = [r["redis_cpu_pct"] for r in rows]
    c.plot(xs, cpu, "o-", color="tab:purple", label="redis-server CPU while held")
    annotate(c, xs, cpu, lambda v: f"{v:.1f}%")
    style(c, "Redis CPU spent keeping them held", "locks held at once (log)", "% of one core")
    ticks_at(c, xs)
    headroom(c)
    c.legend(fontsize=8)
    save(fig, "curve-locks-held.png", f"dlm bench curves --curves held; {when(rows)}")

rows = sorted(load("queue-size.jsonl"), key=lambda r: r["waiting"])
if rows:
    xs = [r["waiting"] for r in rows]
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(15, 4.6))
    enq = [r["enqueue_per_s"] for r in rows]
    pro = [r["process_per_s"] for r in rows]
    a.plot(xs, enq, "o-", label="enqueue (batches of 1000, 8 in flight)")
    a.plot(xs, pro, "s-", label="process (1 worker, concurrency 64, no-op)")
    annotate(a, xs, enq)
    annotate(a, xs, pro)
    style(a, "Queue rates vs waiting tasks", "waiting tasks (log)", "tasks/s")
    ticks_at(a, xs)
    headroom(a)
    a.legend(fontsize=8)
    b.plot(xs, [r["claim_p99_us"] for r in rows], "o-", color="tab:red", label="claim(64) p99")
    b.plot(xs, [r["claim_p50_us"] for r in rows], "o--", color="tab:red", alpha=0.5, label="claim(64) p50")
    annotate(b, xs, [r["claim_p99_us"] for r in rows], micros)
    annotate(b, xs, [r["claim_p50_us"] for r in rows], micros, below=True)
    style(b, "Claim latency vs waiting tasks", "waiting tasks (log)", "one claim of 64 tasks")
    ticks_at(b, xs)
    b.yaxis.set_major_formatter(MICROS)
    headroom(b)
    b.legend(fontsize=8)
    mem = [r["bytes_per_waiting_task"] for r in rows]
    c.plot(xs, mem, "o-", color="tab:green", label="Redis used_memory / waiting task")
    annotate(c, xs, mem, lambda v: f"{v:.0f} B")
    style(c, "Memory per waiting task", "waiting tasks (log)", "bytes")
    ticks_at(c, xs)
    headroom(c)
    c.legend(fontsize=8)
    save(fig, "curve-queue-size.png", f"dlm bench curves --curves queue; {when(rows)}")

rows = sorted(load("queue-workers.jsonl"), key=lambda r: r["workers"])
if rows:
    xs = [r["workers"] for r in rows]
    ys = [r["process_per_s"] for r in rows]
    fig, a = plt.subplots(figsize=(8.5, 4.6))
    a.plot(xs, ys, "o-", label=f"{human(rows[0]['tasks'])} no-op tasks, concurrency 64 per process")
    annotate(a, xs, ys)
    style(a, "Process rate vs worker processes on one queue", "worker processes (log)", "tasks/s")
    ticks_at(a, xs)
    headroom(a)
    a.legend(fontsize=8)
    save(fig, "curve-queue-workers.png", f"dlm bench curves --curves workers; {when(rows)}")
