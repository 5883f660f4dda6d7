#!/usr/bin/env python3
"""callgrind_fcall.py — per callgrind dump (--dump-before=fcallCommand: one FCALL per dump), the dump's total
instructions and the FCALL's own: the inclusive cost of the calls to fcallCommand in it (the Lua, its
redis.calls and Redis's forced GC step; what SLOWLOG times), without the server's work between commands
(serverCron's incremental rehash of the keyspace, reading and parsing requests, replies) that the dump also
holds. Used by scripts/ingest-percall.sh.

    scripts/callgrind_fcall.py DUMP...   # prints "<dump> <total> <fcall>" per dump
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


if __name__ == '__main__':
    for p in sys.argv[1:]:
        t, c = costs(p)
        print(p, t, c)
