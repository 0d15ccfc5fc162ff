"""Draw docs/curve-locks-vs-peers.png from docs/curves/locks-vs-peers.jsonl (bench-vs-peers-curve.sh):
cycles/s and redis-server CPU per cycle against concurrency, one line per implementation."""
import json
import sys

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in open(src) if l.strip()]
styles = {
    "dlm": dict(color="#1f6feb", marker="o", label="dlm (CLI default: 1 runtime thread)"),
    "dlm-threads2": dict(color="#1f6feb", marker="o", linestyle="--", mfc="white",
                         label="dlm --threads 2"),
    "rslock": dict(color="#d1242f", marker="s", label="rslock 0.10 (tokio default: 2 threads)"),
}
fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 8), sharex=True)
for line, style in styles.items():
    pts = sorted((r["concurrency"], r) for r in rows if r["line"] == line)
    if not pts:
        continue
    xs = [c for c, _ in pts]
    top.plot(xs, [r["ops_per_s"] / 1000 for _, r in pts], **style)
    bottom.plot(xs, [r["redis_cpu_proc_us_per_cycle"] for _, r in pts], **style)
top.set_ylabel("acquire+release cycles/s (thousands)")
top.set_title("Distinct keys: dlm and rslock on one redis-server (2 shared cores)")
bottom.set_ylabel("redis-server CPU per cycle (µs)")
bottom.set_yscale("log")
bottom.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
bottom.yaxis.set_minor_formatter(matplotlib.ticker.FormatStrFormatter("%.0f"))
bottom.set_xlabel("concurrent tasks (C)")
bottom.set_xscale("log", base=2)
xs = sorted({r["concurrency"] for r in rows})
bottom.set_xticks(xs)
bottom.set_xticklabels([str(x) for x in xs])
for ax in (top, bottom):
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
stamps = sorted(r.get("stamp", "") for r in rows)
loads = sorted({r.get("load", "") for r in rows})
fig.text(0.01, 0.005, f"{stamps[0]} .. {stamps[-1]}, load {loads[0]} .. {loads[-1]}; "
         "redis CPU from /proc over warmup + window", fontsize=7, color="#555")
fig.tight_layout(rect=(0, 0.02, 1, 1))
fig.savefig(dst, dpi=110)
print(f"wrote {dst}")
