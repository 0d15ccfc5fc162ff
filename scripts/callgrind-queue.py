#!/usr/bin/env python3
"""Redis instructions per queue round, counted with callgrind (BENCHMARKS.md, issue 24).

A round is one enqueue of N id-only tasks, one claim of N and one ack of N, sent
with `redis-cli --pipe` to a `valgrind --tool=callgrind redis-server` through the
queue scripts as `crates/dlm/src/queue/ops.rs` assembles them (helpers first) at
git revision REV ('WT': the work tree). The cost of a round is the difference of
the totals of an R2-round run and an R1-round run over R2 - R1, so start-up and
script loading cancel out. Deterministic to about 0.2%, unlike wall clock here.

    scripts/callgrind-queue.py REV NKEYS N R1 R2 [events]
    scripts/callgrind-queue.py 8d4e1b6 19 1 200 1200    # before issue 24
    scripts/callgrind-queue.py WT 19 1 200 1200         # a plain queue now (narrow calls)
    scripts/callgrind-queue.py WT 31 1 200 1200 events  # the event log on

NKEYS is how many keys each call sends (19: a narrow call; 31: all). Needs
valgrind, redis-server and redis-cli. Revisions from before the per-call
layouts (8d4e1b6 and older) are sent the old argument layout; later ones the
layout with "values per task" (3489950 on).
"""
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time

REPO = os.environ.get('REPO', os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SUFFIXES = ['waiting', 'payload', 'inflight', 'lease', 'attempts', 'dead', 'errors', 'fence', 'stats',
            'signal', 'config', 'prio', 'group', 'ready', 'gcount', 'parked', 'parkedid', 'rate',
            'completed', 'workers', 'workerinfo', 'timeout', 'results', 'done', 'progress', 'blocked',
            'pending', 'deps', 'children', 'depfail', 'events']


def main():
    rev, nkeys, n, r1, r2 = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    events = len(sys.argv) > 6 and sys.argv[6] == 'events'

    def show(path):
        if rev == 'WT':
            with open(os.path.join(REPO, path)) as f:
                return f.read()
        return subprocess.run(['git', '-C', REPO, 'show', f'{rev}:{path}'],
                              capture_output=True, text=True, check=True).stdout

    ops = show('crates/dlm/src/queue/ops.rs')

    def build(name):
        m = re.search(r'script!\(\s*' + name + r',\s*(?:\[([^\]]*)\],\s*)?"([^"]+)"\s*\)', ops)
        helpers = re.findall(r'"([^"]+)"', m.group(1) or '')
        return ''.join(show(f'crates/dlm/src/queue/scripts/{h}.lua') for h in helpers) + \
            show(f'crates/dlm/src/queue/scripts/{m.group(2)}')

    scripts = {name: build(name) for name in ['ENQUEUE', 'CLAIM', 'ACK']}
    # Before the per-call layouts, enqueue and ack took no "values per task" argument.
    old_layout = 'STRIDE' not in scripts['ENQUEUE']
    sha = {name: hashlib.sha1(s.encode()).hexdigest() for name, s in scripts.items()}
    keys = [f'dlm:queue:{{cg}}:{s}' for s in SUFFIXES[:nkeys]]

    def resp(*args):
        out = [f'*{len(args)}\r\n'.encode()]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(a), a))
        return b''.join(out)

    def commands(rounds):
        parts = [resp('SCRIPT', 'LOAD', s) for s in scripts.values()]
        if events:
            parts.append(resp('HSET', keys[10], 'events_maxlen', 10000))
        fence = 0  # a fresh server's lease counter: the claims' fences are 1, 2, ...
        for r in range(rounds):
            ids = [f't{r:06d}-{i:04d}' for i in range(n)]  # claimed in this order (same due time)
            a = ['EVALSHA', sha['ENQUEUE'], nkeys, *keys, 0, 'keep', '0'] + ([] if old_layout else [5])
            for i in ids:
                a += [i, '0', '', 0, '']
            parts.append(resp(*a))
            parts.append(resp('EVALSHA', sha['CLAIM'], nkeys, *keys, n, 30000, 5, 1000))
            a = ['EVALSHA', sha['ACK'], nkeys, *keys] + ([] if old_layout else [2])
            for i in ids:
                fence += 1
                a += [i, fence]
            parts.append(resp(*a))
        return b''.join(parts)

    def total(rounds, work):
        sock, out = os.path.join(work, f'r{rounds}.sock'), os.path.join(work, f'cg-{rounds}.out')
        server = subprocess.Popen(['valgrind', '--tool=callgrind', f'--callgrind-out-file={out}',
                                   'redis-server', '--port', '0', '--unixsocket', sock,
                                   '--save', '', '--appendonly', 'no'],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                if os.path.exists(sock):
                    break
                time.sleep(0.1)
            time.sleep(0.5)
            sent = subprocess.run(['redis-cli', '-s', sock, '--pipe'], input=commands(rounds),
                                  capture_output=True)
            done = subprocess.run(['redis-cli', '-s', sock, 'HGET', keys[8], 'processed'],
                                  capture_output=True, text=True).stdout.strip()
            subprocess.run(['redis-cli', '-s', sock, 'SHUTDOWN', 'NOSAVE'], capture_output=True)
            server.wait(timeout=120)
        finally:
            if server.poll() is None:
                server.kill()
        if done != str(rounds * n):
            sys.exit(f'{rounds} rounds processed {done!r} tasks: {sent.stderr.decode()[-400:]}')
        with open(out) as f:
            return next(int(line.split()[1]) for line in f if line.startswith(('summary:', 'totals:')))

    with tempfile.TemporaryDirectory() as work:
        t1, t2 = total(r1, work), total(r2, work)
    label = f'{rev} keys={nkeys} N={n}' + (' events' if events else '')
    print(f'{label}: {(t2 - t1) / (r2 - r1):,.0f} instructions per round')


if __name__ == '__main__':
    main()
