#!/usr/bin/env bash
# redis-percall.sh — the distribution of Redis instructions per FCALL (route and lease calls alike) under
# `kvrouter bench route`: callgrind dumps its counters before every call (--dump-before=fcallCommand), so
# each dump holds one call's instructions. A deterministic view of the per-call tail (SPEC §8: every call
# bounded) that the host's stalls cannot blur; it counts user space only, so a tail of page faults or
# syscalls does not show (docs/PERFORMANCE.md "Issue 12, fourth pass": builds with no instruction tail
# still had more calls over 1 ms in bench-tail.sh).
#
#   scripts/redis-percall.sh PORT KVROUTER DECISIONS [bench route flags…]
#   e.g. scripts/redis-percall.sh 7355 bin/kvrouter 1000 --workers 4096
#
# Starts its own redis-server on PORT (never one it did not start), loads the benchmark's index natively
# (prefix instr:), saves it, restarts from that RDB under callgrind, makes 300 warm-up decisions, then
# DECISIONS with instrumentation on. REDIS_SERVER picks the binary. Prints the calls' p50/p90/p99/p99.9/max
# instructions and keeps the dumps and percall.txt (sorted) in the printed directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/redis-percall.sh PORT KVROUTER DECISIONS [bench route flags…]}
kvr=${2:?KVROUTER} n=${3:?DECISIONS}
shift 3
command -v valgrind >/dev/null || { echo "redis-percall: needs valgrind" >&2; exit 2; }
srv=${REDIS_SERVER:-redis-server}
if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "redis-percall: something already listens on $port; pick a free port" >&2
  exit 2
fi
dir=$(mktemp -d /tmp/redis-percall.XXXXXX)
cleanup() { redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; }
trap cleanup EXIT
wait_up() { for _ in $(seq 1200); do [[ $(redis-cli -p "$port" ping 2>/dev/null) == PONG ]] && return 0; sleep 0.5; done; echo "redis-percall: server on $port not up" >&2; return 1; }
bench() { "$kvr" bench route --store "redis://127.0.0.1:$port" --prefix instr: --clients 1 --repeat 1 --calibrate 0 --routes "$1" "${@:2}"; }
"$srv" --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" --logfile "$dir/load.log"
wait_up
bench 10 "$@" >/dev/null 2>&1
redis-cli -p "$port" save >/dev/null
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 1
valgrind --tool=callgrind --instr-atstart=no --dump-before=fcallCommand --callgrind-out-file="$dir/cg.%p" \
  "$srv" --port "$port" --save '' --appendonly no --dir "$dir" --dbfilename dump.rdb >"$dir/valgrind.log" 2>&1 &
wait_up
pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
bench 300 "$@" >/dev/null 2>&1
callgrind_control -i on "$pid" >/dev/null 2>&1
bench "$n" "$@" >/dev/null 2>&1
callgrind_control -i off "$pid" >/dev/null 2>&1
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 2
for f in "$dir"/cg."$pid".*; do
  t=$(grep -m1 '^summary:' "$f" | awk '{print $2}')
  if [[ -n $t && $t -gt 0 ]]; then echo "$t"; fi
done | sort -n >"$dir/percall.txt"
awk '{a[NR] = $1} END {printf "redis-percall: %d calls; instructions p50 %d p90 %d p99 %d p99.9 %d max %d\n", NR, a[int(NR * .5)], a[int(NR * .9)], a[int(NR * .99)], a[int(NR * .999)], a[NR]}' "$dir/percall.txt"
echo "redis-percall: dumps in $dir"
