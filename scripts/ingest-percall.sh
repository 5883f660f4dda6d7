#!/usr/bin/env bash
# ingest-percall.sh — the distribution of Redis instructions per apply_events call under `kvrouter bench
# ingest` (SPEC §8: every call bounded; statestore/redis.go applyWorkBudget), and the instructions per
# stored block they add up to. callgrind dumps its counters before every FCALL (--dump-before=fcallCommand),
# so each dump holds one call: deterministic within ~1 %, unlike the host's timings. Companion of
# scripts/redis-percall.sh (route and done).
#
#   scripts/ingest-percall.sh PORT KVROUTER [bench ingest flags…]
#   e.g. scripts/ingest-percall.sh 7356 bin/kvrouter --workers 4096 --blocks 60000 --replicas 4
#
# Starts its own redis-server under callgrind on PORT (never one it did not start; REDIS_SERVER picks the
# binary, e.g. a jemalloc build like Debian's), runs the benchmark once with instrumentation off (the
# Lua VM's memos and the server's tables warm), then again with it on (1 client, one repeat). The counted
# run's apply_events calls are the dumps that ran HSETNX (a Stored event's first command; bench ingest
# sends only Stored events); registrations and the bench's own commands are left out. Prints calls, blocks
# per call, instructions per stored block (the dumps' sum / --blocks) and the p50/p90/p99/p99.9/max of the
# FCALL's own instructions (scripts/callgrind_fcall.py: fcallCommand inclusive, Redis's forced GC step
# included — what SLOWLOG times) and of the whole dump (with the server's work between calls: serverCron's
# incremental rehash of a growing keyspace, request parsing); keeps the dumps and calls.txt (dump, total,
# fcall) in the printed directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/ingest-percall.sh PORT KVROUTER [bench ingest flags…]}
kvr=${2:?KVROUTER}
shift 2
command -v valgrind >/dev/null || { echo "ingest-percall: needs valgrind" >&2; exit 2; }
. scripts/callgrind-redis.sh
cg_refuse_busy ingest-percall "$port"
blocks=1000000
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
  --blocks | -blocks) blocks=${args[i + 1]} ;;
  --blocks=* | -blocks=*) blocks=${args[i]#*=} ;;
  esac
done
dir=$(mktemp -d /tmp/ingest-percall.XXXXXX)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT
valgrind --tool=callgrind --instr-atstart=no --dump-before=fcallCommand --callgrind-out-file="$dir/cg.%p" \
  "${REDIS_SERVER:-redis-server}" --port "$port" --save '' --appendonly no --dir "$dir" >"$dir/valgrind.log" 2>&1 &
cg_port=$port cg_name=ingest-percall cg_up
pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
bench() { "$kvr" bench ingest --store "redis://127.0.0.1:$port" --clients 1 --repeat 1 "$@"; }
bench "$@" >/dev/null 2>&1
callgrind_control -i on "$pid" >/dev/null 2>&1
bench "$@" >"$dir/bench.json" 2>/dev/null
callgrind_control -i off "$pid" >/dev/null 2>&1
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
files=()
for f in "$dir"/cg."$pid".*; do
  if grep -q 'hsetnxCommand' "$f"; then files+=("$f"); fi
done
python3 scripts/callgrind_fcall.py "${files[@]}" >"$dir/calls.txt"
awk -v b="$blocks" '{n++; t += $2} END {printf "ingest-percall: %d apply_events calls, %.1f blocks per call, %.0f instructions per stored block\n", n, b / n, t / b}' "$dir/calls.txt"
python3 scripts/callgrind_fcall.py --summary ingest-percall "$dir/calls.txt"
echo "ingest-percall: dumps in $dir"
