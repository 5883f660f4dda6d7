#!/usr/bin/env bash
# luaprof.sh — VM instructions and redis.calls per line of kvrouter's Functions library, for one decision
# (route + done) of `kvrouter bench route`: the attribution inside Lua that callgrind cannot give (it sees
# Redis's luaV_execute as one function). Companion of scripts/redis-instr.sh, which counts the totals.
#
#   REDIS_SRC=/path/to/redis-7.0.15 scripts/luaprof.sh PORT [DECISIONS [bench route flags…]]
#   e.g. REDIS_SRC=/root/rsrc/redis-7.0.15 scripts/luaprof.sh 7361 400 --workers 64
#   BENCH=ingest REDIS_SRC=… scripts/luaprof.sh PORT [BLOCKS [bench ingest flags…]]   # apply_events instead
#   e.g. BENCH=ingest REDIS_SRC=/root/rsrc/redis-7.0.15 scripts/luaprof.sh 7361 30000 --replicas 4
#
# With BENCH=ingest the recording is a whole `kvrouter bench ingest --workers 16 --clients 1 --repeat 1` of
# BLOCKS blocks (default 30000) from an empty server (pool and workers registered in it, then the events).
#
# Needs Redis's source tree built (apt-get source redis; cd redis-7.0.15; make): luaprof links its Lua 5.1
# (deps/lua, with struct, cmsgpack, bit, cjson) and hiredis. Steps: its own redis-server on PORT (never
# one it did not start) gets the benchmark's index natively and is saved; DECISIONS decisions run while
# `redis-cli monitor` records their FCALLs; the server restarts from the saved state; luaprof
# (scripts/luaprof/luaprof.c) then runs the library's Lua in its own process on the recorded calls, its
# redis.calls going to that server, so every call takes the path it took in Redis. The first quarter of
# the calls warm the memos and are not counted. Printed: the lines with the most VM instructions per
# profiled call (route and lease calls together; a decision is one of each), with the library's text.
# A VM instruction is not a machine instruction: a line calling string.sub or struct.pack counts one per
# call, and the C work behind it is not shown. TIME=1 counts CPU cycles per line instead (rdtsc; the C work
# of a line included, Redis round trips excluded; noisy, so compare shares). LUAPROF_ALLOC=1 counts the
# Lua heap's allocations and growths per line instead (the garbage the collector sweeps; a redis.call's
# reply table and strings go to its line). TOP=N lines (default 50).
# Output kept in $OUT_DIR (printed).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: REDIS_SRC=… scripts/luaprof.sh PORT [DECISIONS [bench route flags…]]}
n=${2:-}
shift $(($# < 2 ? $# : 2))
src=${REDIS_SRC:?REDIS_SRC: a built Redis source tree (apt-get source redis; make)}
dir=${OUT_DIR:-$(mktemp -d /tmp/luaprof.XXXXXX)}
mkdir -p "$dir"
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter
cc -O2 -Wall -I "$src/deps/lua/src" -I "$src/deps/hiredis" -o "$dir/luaprof" scripts/luaprof/luaprof.c \
  "$src/deps/lua/src/liblua.a" "$src/deps/hiredis/libhiredis.a" -lm
go run ./scripts/luaprof/library >"$dir/library.lua"
if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "luaprof: something already listens on $port; pick a free port" >&2
  exit 2
fi
mon=
cleanup() {
  [[ -n $mon ]] && kill "$mon" 2>/dev/null || true
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
}
trap cleanup EXIT
start() { redis-server --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" --dbfilename "$1" --logfile "$dir/redis.log"
  for _ in $(seq 200); do [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && return 0; sleep 0.1; done; return 1; }
if [[ ${BENCH:-route} == ingest ]]; then
  n=${n:-30000}
  bench() { "$kvr" bench ingest --store "redis://127.0.0.1:$port" --workers 16 --clients 1 --repeat 1 --blocks "$1" "${@:2}"; }
else
  n=${n:-400}
  bench() { "$kvr" bench route --store "redis://127.0.0.1:$port" --prefix prof: --clients 1 --repeat 1 --calibrate 0 --routes "$1" "${@:2}"; }
fi
start base.rdb
[[ ${BENCH:-route} == ingest ]] || bench 10 "$@" >/dev/null 2>&1
redis-cli -p "$port" save >/dev/null
cp "$dir/base.rdb" "$dir/start.rdb"
redis-cli -p "$port" monitor >"$dir/monitor.txt" &
mon=$!
sleep 0.5
bench "$n" "$@" >/dev/null 2>&1
sleep 0.5
kill "$mon"; mon=
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 0.5
start start.rdb
python3 scripts/luaprof/monitor2replay.py "$dir/monitor.txt" "$dir/replay.bin"
calls=$(python3 -c "import struct,sys; d=open('$dir/replay.bin','rb').read(); i=c=0
while i < len(d):
    a=struct.unpack_from('<I',d,i)[0]; i+=4
    for _ in range(a): i+=4+struct.unpack_from('<I',d,i)[0]
    c+=1
print(c)")
"$dir/luaprof" 127.0.0.1 "$port" "$dir/library.lua" "$dir/replay.bin" $((calls / 4)) ${TIME:+time} >"$dir/lines.tsv"
echo "luaprof: output in $dir"
head -1 "$dir/lines.tsv"
python3 - "$dir/lines.tsv" "$dir/library.lua" <<'PY'
import sys
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1]) if not l.startswith('#')]
lib = open(sys.argv[2], encoding='latin-1').read().split('\n')
rows.sort(key=lambda r: -float(r[1]))
print(f"{'line':>5} {'vm/call':>8} {'share':>6} {'redis':>6}  text")
for r in rows[:int(__import__('os').environ.get('TOP', '50'))]:
    ln = int(r[0])
    print(f"{ln:>5} {float(r[1]):8.1f} {100*float(r[2]):5.1f}% {float(r[3]):6.2f}  {lib[ln-1].strip()[:110]}")
PY
