#!/usr/bin/env bash
# redis-instr.sh — Redis instructions per decision (route + done), counted by valgrind's callgrind: a
# figure that does not move with the shared box's load (the same binary and state give the same count
# within ~1 %), for comparing two builds' Lua when Redis CPU seconds are too noisy to tell 5-10 % apart.
#
#   scripts/redis-instr.sh PORT KVROUTER_A KVROUTER_B [ROUNDS [DECISIONS [bench route flags…]]]
#   e.g. scripts/redis-instr.sh 7350 /tmp/old/kvrouter bin/kvrouter 2 1000 --workers 64
#
# It starts its own redis-server on PORT (never one it did not start), loads the benchmark's index there
# natively (`kvrouter bench route --prefix instr:`, 1 M entries by default), saves it, and restarts the
# server from that RDB under `valgrind --tool=callgrind --instr-atstart=no`. Then, ROUNDS times (default 2)
# and alternating A and B: 200 warm-up decisions (each build loads its own Functions library, by name, and
# fills its memos), then DECISIONS sequential decisions (default 1000; 1 client, done after each) with
# instrumentation on (with --clients K among the flags: DECISIONS per client, K clients). Printed: the
# instructions Redis executed per decision, for each run, and the same without the idle server's background
# (counted first, 10 s with no load; subtracted for the run's duration). Client work is
# not counted (another process); the kernel's socket work is not either (callgrind counts user space).
# It refuses --no-done: a run that leaves leases makes the next run release them when they expire, so the
# two builds would not see the same state.
# REDIS_SERVER (default redis-server) picks the binary: Debian's works for totals; for attribution per C
# function build Redis from source with symbols (apt-get source redis; make) and read the kept callgrind
# files ($OUT_DIR, printed) with callgrind_annotate --inclusive=yes.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/redis-instr.sh PORT KVROUTER_A KVROUTER_B [ROUNDS [DECISIONS [flags…]]]}
a=${2:?KVROUTER_A} b=${3:?KVROUTER_B}
rounds=${4:-2} n=${5:-1000}
shift $(($# < 5 ? $# : 5))
for f in "$@"; do [[ $f == --no-done ]] && { echo "redis-instr: --no-done leaves leases that change the next run's work" >&2; exit 2; }; done
# --clients K (one value) among the bench flags: --routes is per client, so a run makes DECISIONS × K.
clients=1
for ((i = 1; i <= $#; i++)); do
  if [[ ${!i} == --clients ]]; then j=$((i + 1)); clients=${!j}; fi
done
[[ $clients =~ ^[0-9]+$ ]] || { echo "redis-instr: --clients takes one number here" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "redis-instr: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
. scripts/callgrind-redis.sh
cg_refuse_busy redis-instr "$port"
dir=${OUT_DIR:-$(mktemp -d /tmp/redis-instr.XXXXXX)}
mkdir -p "$dir"
bench() { cg_bench "$@"; }
cg_start redis-instr "$port" "$dir" "$a" -- "$@"
pid=$cg_pid
echo "callgrind files in $dir (redis pid $pid)"
# The idle server's background instructions per second (cg_idle): each run's count includes them for its
# duration, ~7 k per decision at this harness's ~165 decisions/s at 64 workers, more for slower builds or
# larger pools. Printed beside each figure, subtracted (scripts/floor-instr.sh counts its floors the same way,
# so the two compare).
bg=$(cg_idle "$dir" "$pid" 10)
echo "background (idle server): $bg instructions per second"
for r in $(seq "$rounds"); do
  for k in "$a" "$b"; do
    bench "$k" 200 "$@" >/dev/null 2>"$dir/warm.err" || { echo "redis-instr: warm-up with $k failed:" >&2; tail -3 "$dir/warm.err" >&2; exit 1; }
    cg_count "$dir" "$pid" bench "$k" "$n" "$@" >"$dir/bench-$r-$(basename "$k").json" 2>/dev/null
    total=$cg_instr ms=$cg_ms f=$cg_file
    echo "round $r $k: $((total / (n * clients))) instructions per decision; $(((total - bg * ms / 1000) / (n * clients))) without the idle background of its $ms ms ($f)"
  done
done
