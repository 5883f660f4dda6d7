#!/usr/bin/env bash
# ingest-floor.sh — what storing a block costs Redis with none of kvrouter's logic: the floor under SPEC §9's
# ingest target (≤ 2 µs of Redis CPU per stored block) for a layout that writes a hash field per block.
#
#   scripts/ingest-floor.sh PORT [CALLS]          # Redis CPU µs per block (INFO cpu deltas), native server
#   CALLGRIND=1 REDIS_SERVER=… scripts/ingest-floor.sh PORT [CALLS]   # Redis instructions per block
#
# Starts its own redis-server on PORT (never one it did not start), loads scripts/ingest-floor/probe.lua and
# calls each probe CALLS times (default 312: ~20,000 blocks) with 64-block events of random hashes
# (scripts/ingest-floor/drive.py, after 200 warm-up calls), then runs `kvrouter bench ingest` for the same
# number of blocks (16 workers, chains on REPLICAS workers (default 1), 1 client) on the same server for
# comparison (KVROUTER picks the binary, ROWS the rows):
#   fl_empty      the FCALL and its 1 KB of arguments
#   fl_per_block  layout 3's writes for a chain new to the index, nothing else: per block one HSETNX into
#                 its index bucket and one HSET into its engine-map bucket, key names built in Lua
#   fl_paged      the index written 16 blocks per command (a page layout), the engine map per block
#   fl_grouped    both maps written 64 blocks per command (the bound of any grouping)
#   kvrouter      apply_events (fencing, counts, parents, work budget, reclaim, …) through kvrouter bench ingest
# With CALLGRIND=1 the server runs under valgrind's callgrind (REDIS_SERVER: a build with symbols, e.g.
# Redis's source built with make) and each row is the instructions inside FCALL (fcallCommand, inclusive)
# per block, counted from a fresh server per row; without, each row is Redis CPU per block.
# Pinned as the other floor and tail scripts (own-redis.sh, as root on ≥ 2 CPUs): the native server on the
# last CPU at SCHED_FIFO 10, the clients (drive.py, kvrouter bench ingest) on the others at SCHED_FIFO 5
# (own_client_pin; CLIENT_PIN=0 leaves them unpinned). Before the nineteenth session neither was pinned.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/ingest-floor.sh PORT [CALLS]}
calls=${2:-312}
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter
srv=${REDIS_SERVER:-redis-server}
. scripts/own-redis.sh   # own_pin, own_client_pin (this script starts its servers itself, one per row)
own_server_pin
own_client_pin
if redis-cli -p "$port" ping >/dev/null 2>&1; then echo "ingest-floor: something already listens on $port" >&2; exit 2; fi
dir=$(mktemp -d /tmp/ingest-floor.XXXXXX)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT
up() { for _ in $(seq 1200); do [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && return 0; sleep 0.5; done; return 1; }
blocks=$((calls * 64))
cpu() { redis-cli -p "$port" info cpu | awk -F: '/used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }
row() { # name: one fresh server, warm-up, the measured part
  local name=$1 out=$dir/$1
  mkdir -p "$out"
  if [[ -n ${CALLGRIND:-} ]]; then
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out/cg.%p" \
      "$srv" --port "$port" --save '' --appendonly no --dir "$out" >"$out/valgrind.log" 2>&1 &
  else
    "${SPIN[@]}" "$srv" --port "$port" --save '' --appendonly no --dir "$out" --daemonize yes --logfile "$out/redis.log"
  fi
  up
  local pid
  pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
  redis-cli -p "$port" -x function load replace <scripts/ingest-floor/probe.lua >/dev/null
  local bench=("$kvr" bench ingest --store "redis://127.0.0.1:$port" --workers 16 --replicas "${REPLICAS:-1}" --clients 1 --repeat 1)
  if [[ $name == kvrouter ]]; then "${CPIN[@]}" "${bench[@]}" --blocks 12800 >/dev/null 2>&1
  else "${CPIN[@]}" python3 scripts/ingest-floor/drive.py "$port" "$name" 200 64 7 >/dev/null; fi
  [[ -n ${CALLGRIND:-} ]] && callgrind_control -i on "$pid" >/dev/null 2>&1
  local t0 t1 per
  t0=$(cpu)
  if [[ $name == kvrouter ]]; then "${CPIN[@]}" "${bench[@]}" --blocks "$blocks" >"$out/bench.json" 2>"$out/bench.err"
  else "${CPIN[@]}" python3 scripts/ingest-floor/drive.py "$port" "$name" "$calls" 64 1 >/dev/null; fi
  t1=$(cpu)
  [[ -n ${CALLGRIND:-} ]] && callgrind_control -i off "$pid" >/dev/null 2>&1
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n ${CALLGRIND:-} ]]; then
    sleep 2
    per=$(callgrind_annotate --inclusive=yes "$out"/cg.* 2>/dev/null | awk -v n="$blocks" '/functions.c:fcallCommand / && !done {gsub(",", "", $1); printf "%.0f", $1 / n; done = 1}')
    printf '%-13s %8s instructions inside FCALL per block\n' "$name" "$per"
  elif [[ $name == kvrouter ]]; then
    per=$(python3 -c "import json,sys; r=json.load(open('$out/bench.json')); print('%.2f' % r['runs'][0]['redis_cpu_us_per_block'])")
    printf '%-13s %8s µs of Redis CPU per block (kvrouter bench ingest, its own measured phase)\n' "$name" "$per"
  else
    printf '%-13s %8s µs of Redis CPU per block\n' "$name" "$(awk -v a="$t0" -v b="$t1" -v n="$blocks" 'BEGIN {printf "%.2f", 1e6 * (b - a) / n}')"
  fi
}
for name in ${ROWS:-fl_empty fl_per_block fl_paged fl_grouped kvrouter}; do row "$name"; done
echo "ingest-floor: $blocks blocks per row; load average $(cut -d' ' -f1-3 /proc/loadavg); clients ${CPIN[*]:-unpinned}; output in $dir"
