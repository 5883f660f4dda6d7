#!/usr/bin/env python3
"""drive.py — calls one of probe.lua's functions CALLS times, each with a 64-block event of random hashes
(seeded), over a raw RESP socket (no client library), and prints Redis CPU µs per block (INFO cpu delta).

    drive.py PORT FUNCTION CALLS [BLOCKS_PER_CALL] [SEED] [SLOTS]

Call i writes engine-map slot i % SLOTS (default 16: kvrouter bench ingest's 16 workers, one slot each).
Key names are as long as kvrouter bench ingest's since layout 6 (its fresh prefix and pool name in the tag;
before, a 40-hex-digit pool tag): Redis and Lua hash and copy them per command.
"""
import random
import socket
import sys


TAG = 'kvr:r01234567:{=w16-c64-k1-e20000}'


def resp(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.f = self.s.makefile('rb')

    def call(self, *args):
        self.s.sendall(resp(*args))
        return self.read()

    def read(self):
        line = self.f.readline()
        t, rest = line[:1], line[1:-2]
        if t in (b'+', b':'):
            return rest
        if t == b'-':
            raise RuntimeError(rest.decode())
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            d = self.f.read(n + 2)
            return d[:-2]
        if t == b'*':
            return [self.read() for _ in range(int(rest))]
        raise RuntimeError('bad reply %r' % line)


def cpu(c):
    info = c.call('INFO', 'cpu').decode()
    kv = dict(l.split(':', 1) for l in info.splitlines() if ':' in l)
    return float(kv['used_cpu_user']) + float(kv['used_cpu_sys'])


def main():
    port, fn, calls = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    nb = int(sys.argv[4]) if len(sys.argv) > 4 else 64
    rnd = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 1)
    slots = int(sys.argv[6]) if len(sys.argv) > 6 else 16
    c = Conn(port)
    blobs = [rnd.randbytes(16 * nb) for _ in range(calls)]
    t0 = cpu(c)
    for i, b in enumerate(blobs):
        c.call('FCALL', fn, 0, TAG + ':e:', TAG + ':g:%d:' % (i % slots), b)
    t1 = cpu(c)
    print(f'{fn}: {calls} calls x {nb} blocks: {1e6 * (t1 - t0) / (calls * nb):.2f} µs of Redis CPU per block')


main()
