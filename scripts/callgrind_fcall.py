#!/usr/bin/env python3
"""callgrind_fcall.py — per callgrind dump (--dump-before=fcallCommand: one FCALL per dump), the dump's total
instructions and the FCALL's own: the inclusive cost of the calls to fcallCommand in it (the Lua, its
redis.calls and Redis's forced GC step; what SLOWLOG times), without the server's work between commands
(serverCron's incremental rehash of the keyspace, reading and parsing requests, replies) that the dump also
holds. Used by scripts/ingest-percall.sh.

    scripts/callgrind_fcall.py DUMP...                  # prints "<dump> <total> <fcall>" per dump
    scripts/callgrind_fcall.py --summary NAME CALLS     # percentiles of such a listing's FCALL dumps

The summary (used by scripts/redis-percall.sh and scripts/ingest-percall.sh) prints two lines, the
FCALL's own instructions and the whole dump's, p50/p90/p99/p99.9/max over the dumps that hold an FCALL.
"""
import re
import sys

CFN = re.compile(r'c?fn=\((\d+)\)(?: (.*))?')


def costs(path):
    names, total, fcall, want, after_calls = {}, 0, 0, False, False
    with open(path, errors='replace') as f:
        for line in f:
            if after_calls:  # the cost line of a call: position, then the inclusive Ir
                after_calls = False
                if want:
                    fcall += int(line.split()[-1])
                continue
            if line.startswith(('fn=', 'cfn=')):
                m = CFN.match(line)
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2).strip()
                    if line.startswith('cfn='):
                        want = names.get(m.group(1), '').endswith('fcallCommand')
            elif line.startswith('calls='):
                after_calls = True
            elif line.startswith('totals:'):
                total = int(line.split()[1])
    return total, fcall


def percentiles(v):
    v = sorted(v)
    return ' '.join(f"{k} {v[min(len(v) - 1, int(len(v) * q))]}"
                    for k, q in (("p50", .5), ("p90", .9), ("p99", .99), ("p99.9", .999))) + f" max {v[-1]}"


def summary(name, listing):
    rows = [l.split() for l in open(listing) if l.strip()]
    rows = [(int(r[1]), int(r[2])) for r in rows if int(r[2]) > 0]
    if not rows:
        print(f"{name}: no FCALL in the dumps")
        return
    print(f"{name}: {len(rows)} calls; the FCALL itself (what SLOWLOG times): {percentiles([c for _, c in rows])}")
    print(f"{name}: the whole dump (+ the server's work between calls): {percentiles([t for t, _ in rows])}")


if __name__ == '__main__':
    if sys.argv[1:2] == ['--summary']:
        summary(sys.argv[2], sys.argv[3])
    else:
        for p in sys.argv[1:]:
            t, c = costs(p)
            print(p, t, c)
