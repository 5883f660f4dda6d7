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
# (prefix instr:), saves it, restarts from that RDB under callgrind, makes WARM (default 300) warm-up decisions, then
# DECISIONS with instrumentation on. REDIS_SERVER picks the binary. Prints the calls' p50/p90/p99/p99.9/max
# instructions, the FCALL's own (scripts/callgrind_fcall.py: what SLOWLOG times) and the whole dump's (with
# the server's work between calls), and keeps the dumps, calls.txt (per dump: total, FCALL) and percall.txt
# (the dumps' totals, sorted) in the printed directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/redis-percall.sh PORT KVROUTER DECISIONS [bench route flags…]}
kvr=${2:?KVROUTER} n=${3:?DECISIONS}
shift 3
command -v valgrind >/dev/null || { echo "redis-percall: needs valgrind" >&2; exit 2; }
. scripts/callgrind-redis.sh
cg_refuse_busy redis-percall "$port"
dir=$(mktemp -d /tmp/redis-percall.XXXXXX)
cg_start redis-percall "$port" "$dir" "$kvr" --dump-before=fcallCommand -- "$@"
pid=$cg_pid
cg_bench "$kvr" "${WARM:-300}" "$@" >/dev/null 2>&1
callgrind_control -i on "$pid" >/dev/null 2>&1
cg_bench "$kvr" "$n" "$@" >/dev/null 2>&1
callgrind_control -i off "$pid" >/dev/null 2>&1
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 2
mapfile -t files < <(ls "$dir"/cg."$pid".* | sort -V)
python3 scripts/callgrind_fcall.py "${files[@]}" >"$dir/calls.txt"
awk '$3 > 0 {print $2}' "$dir/calls.txt" | sort -n >"$dir/percall.txt"
python3 scripts/callgrind_fcall.py --summary redis-percall "$dir/calls.txt"
echo "redis-percall: dumps in $dir"
