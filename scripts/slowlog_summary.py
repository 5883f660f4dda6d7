#!/usr/bin/env python3
"""slowlog_summary: a Redis's whole SLOWLOG by command, client calls only.

  python3 scripts/slowlog_summary.py PORT

Reads every retained SLOWLOG entry of the Redis on 127.0.0.1:PORT (RESP over a socket: the arguments are
binary) and prints, per command (FCALLs by function), how many calls were logged, the longest, µs, and how
many reached 2, 5 and 10 ms (a VM stall or the kernel's real-time throttling, ~50 ms, shows as the long
ones; a call's own work at 4,096 workers is 0.2-0.6 ms).
Commands a script or function ran (client "?:0") are left out: they are part of their call. Used by
scripts/bench-tail.sh for the index loading and, after a SLOWLOG RESET, for the benchmark after it.
"""
import collections
import socket
import sys


def read(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read(f) for _ in range(n)]
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if kind == b":":
        return int(rest)
    return rest


def main():
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    f = s.makefile("rb")
    s.sendall(b"*3\r\n$7\r\nSLOWLOG\r\n$3\r\nGET\r\n$2\r\n-1\r\n")
    entries = read(f)
    s.sendall(b"*3\r\n$6\r\nCONFIG\r\n$3\r\nGET\r\n$23\r\nslowlog-log-slower-than\r\n")
    threshold = read(f)[1].decode()
    count, worst = collections.Counter(), collections.defaultdict(int)
    over = collections.defaultdict(lambda: [0, 0, 0])   # calls >= 2, 5, 10 ms
    for e in entries:
        if len(e) > 4 and e[4].startswith(b"?"):
            continue
        args = e[3]
        name = args[0].decode(errors="replace").upper()
        if name == "FCALL" and len(args) > 1:
            name += " " + args[1].decode(errors="replace")
        count[name] += 1
        worst[name] = max(worst[name], e[2])
        for j, ms in enumerate((2, 5, 10)):
            if e[2] >= ms * 1000:
                over[name][j] += 1
    print(f"SLOWLOG ({len(entries)} entries retained; slowlog-log-slower-than is now {threshold} µs), client calls by command:")
    for name, n in count.most_common():
        o = over[name]
        print(f"  {n:6d}  max {worst[name]:7d} µs  (>= 2 ms {o[0]}, >= 5 ms {o[1]}, >= 10 ms {o[2]})  {name}")
    if not count:
        print("  none")


if __name__ == "__main__":
    main()
