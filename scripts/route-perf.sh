#!/usr/bin/env bash
# route-perf.sh — where kvrouter's Redis time goes, by time: `perf record -e cpu-clock` (the software clock:
# this VM has no hardware counters) on a redis-server of its own while `kvrouter bench route` drives it,
# grouped by scripts/perf_groups.py (kernel, string interning, the Lua collector, KEYS/ARGV, the commands
# inside redis.call, the interpreter, …). Time, not instructions: cache misses count, which callgrind
# (scripts/redis-instr.sh) and luaprof cannot show (docs/PERFORMANCE.md "Seventeenth session").
#
#   REDIS_SERVER=/root/rsrc/jem/src/redis-server scripts/route-perf.sh PORT [bench route flags…]
#   e.g. scripts/route-perf.sh 7350 --workers 64 --blocks 1000000 --clients 1 --no-done
#
# The server needs symbols for the grouping (Debian's redis-server is stripped; build Debian's source:
# `apt-get source redis` then `make BUILD_TLS=no USE_SYSTEMD=no USE_SYSTEM_JEMALLOC=yes`, docs/REDIS.md).
# Call graphs are taken with DWARF (Redis is built without frame pointers). The index is loaded first (pool
# under --prefix perf:, kept for the run), then the bench runs PERF_SECONDS + 6 s and perf records
# PERF_SECONDS (default 6) of the server from 3 s into it. Defaults for the bench: --workers 64 --blocks
# 1000000 --clients 1. KVROUTER picks the binary (default bin/kvrouter). Prints the groups; PERF_DATA=FILE
# keeps perf.data. Never touches a server it did not start.
# BENCH=ingest profiles apply_events instead: `kvrouter bench ingest` with the flags given (default --workers 16
# --blocks 1000000) from an empty server, perf recording PERF_SECONDS from 4 s into it (the index then holds a
# few hundred thousand entries and grows; size --blocks so the load outlasts the window: ~100 k blocks/s here).
set -euo pipefail
port="${1:?usage: scripts/route-perf.sh PORT [bench route flags…]}"
shift
command -v perf >/dev/null || { echo "route-perf: needs perf (Debian linux-perf)" >&2; exit 2; }
cd "$(dirname "${BASH_SOURCE[0]}")/.."
. scripts/own-redis.sh
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o bin/kvrouter ./cmd/kvrouter
secs="${PERF_SECONDS:-6}"
flags=("$@")
own_redis_start route-perf "$port"
pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '/^process_id:/ {print $2}')
store="$own_url"
if [[ ${BENCH:-route} == ingest ]]; then
  ((${#flags[@]})) || flags=(--workers 16 --blocks 1000000)
  "$kvr" bench ingest --store "$store" "${flags[@]}" ${INGEST_REPEAT_FLAG---repeat 1} >"$own_dir/bench.json" 2>"$own_dir/bench.txt" &
  bench=$!
  sleep 4
else
  ((${#flags[@]})) || flags=(--workers 64 --blocks 1000000 --clients 1)
  echo "route-perf: loading the index (${flags[*]})" >&2
  "$kvr" bench route --store "$store" "${flags[@]}" --duration 1s --repeat 1 --calibrate 0 --prefix perf: >/dev/null 2>&1
  "$kvr" bench route --store "$store" "${flags[@]}" --duration "$((secs + 6))s" --repeat 1 --calibrate 0 --prefix perf: \
    >"$own_dir/bench.json" 2>"$own_dir/bench.txt" &
  bench=$!
  sleep 3
fi
data="${PERF_DATA:-$own_dir/perf.data}"
perf record -q -e cpu-clock -F 2000 --call-graph dwarf,16384 -p "$pid" -o "$data" -- sleep "$secs" >/dev/null 2>&1
wait "$bench"
{ grep -v '^note' "$own_dir/bench.txt" || true; } | tail -n 2 >&2
srv="${REDIS_SERVER:-redis-server}"
echo "route-perf: $("$srv" --version | awk '{print $3}') ($(command -v "$srv")), load $(cut -d' ' -f1-3 /proc/loadavg)"
perf script -i "$data" 2>/dev/null | python3 scripts/perf_groups.py
