#!/usr/bin/env python3
"""monitor2replay.py — the FCALLs of a `redis-cli monitor` capture as luaprof's replay records.

    monitor2replay.py MONITOR.txt REPLAY.bin [FUNCTION-SUBSTRING]

Keeps the top-level FCALL lines (not the commands scripts run: MONITOR shows those with a "lua" client),
decodes redis-cli's quoting (\\xNN, \\", \\\\, \\n, \\r, \\t, \\a, \\b) and writes per call: u32 argc, then
argc × (u32 length, bytes), little-endian: FCALL's arguments without the command name.
"""
import struct
import sys

ESC = {'n': b'\n', 'r': b'\r', 't': b'\t', 'a': b'\a', 'b': b'\b', '"': b'"', '\\': b'\\'}


def tokens(s):
    out, i = [], 0
    while True:
        i = s.find('"', i)
        if i < 0:
            return out
        i += 1
        buf = bytearray()
        while s[i] != '"':
            c = s[i]
            if c == '\\':
                n = s[i + 1]
                if n == 'x':
                    buf.append(int(s[i + 2:i + 4], 16))
                    i += 4
                    continue
                buf += ESC[n]
                i += 2
                continue
            buf += c.encode('latin-1')
            i += 1
        out.append(bytes(buf))
        i += 1


def main():
    src, dst = sys.argv[1], sys.argv[2]
    want = sys.argv[3].encode() if len(sys.argv) > 3 else b''
    n = 0
    with open(src, encoding='latin-1') as f, open(dst, 'wb') as o:
        for line in f:
            head = line.split('"', 1)[0]
            if ' lua]' in head or '[' not in head:
                continue
            t = tokens(line)
            if not t or t[0].upper() != b'FCALL' or want not in t[1]:
                continue
            args = t[1:]
            o.write(struct.pack('<I', len(args)))
            for a in args:
                o.write(struct.pack('<I', len(a)) + a)
            n += 1
    print(f'monitor2replay: {n} calls', file=sys.stderr)


main()
