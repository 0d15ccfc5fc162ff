"""Render a bench-python.sh result directory (locks.jsonl, queue.jsonl) as markdown, with the
issue-25 targets checked.  Usage: python3 report.py <dir>"""
import json
import os
import sys

d = sys.argv[1]


def load(name):
    p = os.path.join(d, name)
    return [json.loads(l) for l in open(p) if l.strip()] if os.path.exists(p) else []


def fmt(x):
    return "" if x is None else (f"{x:,}" if isinstance(x, (int, float)) else str(x))


locks = [r for r in load("locks.jsonl") if "error" not in r]
if load("locks.jsonl"):
    print("### Locks from Python (ops = acquire+release cycles; latency = one cycle)\n")
    print("| impl | mode | C | ops/s | p50 µs | p99 µs | attempts | failed | errors | violations | keys left | redis CPU % | redis CPU µs/cycle |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in load("locks.jsonl"):
        if "error" in r:
            print(f"| {r['impl']} | {r['mode']} | {r['concurrency']} | FAILED | | | | | | | | | |")
            continue
        print(f"| {r['impl']} | {r['mode']} | {r['concurrency']} | {r['ops_per_s']:,} | {r['p50_us']:,} | {r['p99_us']:,} "
              f"| {fmt(r.get('attempts'))} | {fmt(r.get('failed_attempts'))} | {fmt(r.get('errors'))} | {fmt(r.get('violations'))} "
              f"| {fmt(r.get('dbsize_after'))} | {fmt(r.get('redis_cpu_pct'))} | {fmt(r.get('redis_cpu_us_per_op'))} |")
    print()

queue = load("queue.jsonl")
if queue:
    print("### Queue from Python: 10,000 no-op tasks (same machine, same run)\n")
    print("| impl | phase | tasks | secs | tasks/s | redis CPU µs/task | how |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in queue:
        if r.get("phase") not in ("enqueue", "process"):
            continue
        how = r.get("how", f"concurrency {r['concurrency']}" if "concurrency" in r else "")
        print(f"| {r['impl']} | {r['phase']} | {r['tasks']:,} | {r['secs']} | {r['tasks_per_s']:,} "
              f"| {fmt(r.get('redis_cpu_us_per_task'))} | {how} |")
    checks = [r for r in queue if r.get("phase") == "check"]
    if checks:
        print()
        print("Left unprocessed after each run (must be 0): " +
              ", ".join(f"{r['impl']} {r.get('left')}" for r in checks))
    print()


def pick(pred, rows):
    xs = [r for r in rows if pred(r)]
    return max(xs, key=lambda r: r["ops_per_s"]) if xs else None


lines = []
for mode, target in (("distinct", 5), ("contended", 20)):
    base = pick(lambda r: r["impl"].startswith("py-redis-") and "asyncio" in r["impl"]
                and r["mode"] == mode and r["concurrency"] == 64, locks)
    for how in ("asyncio", "threads"):
        ours = pick(lambda r: r["impl"] == f"dlm-python-{how}" and r["mode"] == mode
                    and r["concurrency"] == 64, locks)
        if base and ours and base["ops_per_s"]:
            x = ours["ops_per_s"] / base["ops_per_s"]
            lines.append(f"| {mode} C=64, dlm-python-{how} vs redis-py asyncio Lock | >= {target}x "
                         f"| {x:.1f}x ({ours['ops_per_s']:,} vs {base['ops_per_s']:,}/s) | {'met' if x >= target else 'MISSED'} |")
proc = {r["impl"]: r for r in queue if r.get("phase") == "process"}
dq = [r for k, r in proc.items() if k.startswith("dlm-python")]
best = max(dq, key=lambda r: r["tasks_per_s"]) if dq else None
for peer in ("arq", "rq"):
    pr = [r for k, r in proc.items() if k.startswith(peer + "-") and "fork" not in k]
    if best and pr:
        p = pr[0]
        x = best["tasks_per_s"] / p["tasks_per_s"]
        lines.append(f"| queue process, {best['impl']} vs {p['impl']} | >= 5x | {x:.1f}x "
                     f"({best['tasks_per_s']:,} vs {p['tasks_per_s']:,}/s) | {'met' if x >= 5 else 'MISSED'} |")
if lines:
    print("### Issue 25 targets\n")
    print("| target | wanted | measured | |")
    print("|---|---:|---:|---|")
    print("\n".join(lines))
    print()
