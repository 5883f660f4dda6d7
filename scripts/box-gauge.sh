#!/usr/bin/env bash
# box-gauge.sh — is this machine quiet enough to judge latency and per-call tails right now? The shared VM's
# speed swings 3× between hours (docs/PERFORMANCE.md, tenth to twelfth sessions), and SPEC §9's p50 and
# issue 15's "every call < 1 ms" (SLOWLOG) can only be judged in a quiet window. Run it first; when it
# says quiet, run the latency and tail benchmarks at once (scripts/route-pinned.sh, scripts/bench-tail.sh,
# scripts/redis-floor.sh), then run it again: a window that closed during them voids them.
#
#   scripts/box-gauge.sh PORT [SECONDS]
#
# Two gauges, both on a redis-server of its own on PORT (never one it did not start), pinned like the
# benchmarks' (scripts/own-redis.sh: last CPU, SCHED_FIFO 10 as root):
#   - PING: Redis CPU per PING from one unpipelined client (`redis-benchmark -n 20000 -c 1 PING`, the INFO
#     cpu delta): 9–17 µs on the quietest box measured, 28–53 µs on slow days;
#   - stalls: scripts/stallprobe/stallprobe.c on Redis's CPU above Redis's priority for SECONDS (default 10),
#     wake-ups over 200 µs late (the vCPU was taken from every task on it).
# Verdict "quiet" when PING ≤ QUIET_PING_US (default 20) and no stall reached 1 ms and at most
# QUIET_STALLS (default 20) were over 200 µs; exit 0 when quiet, 1 when not. One JSON line on stdout.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port="${1:?usage: scripts/box-gauge.sh PORT [SECONDS]}"
secs="${2:-10}"
command -v cc >/dev/null || { echo "box-gauge: needs a C compiler (cc) for scripts/stallprobe/stallprobe.c" >&2; exit 2; }
command -v redis-benchmark >/dev/null || { echo "box-gauge: needs redis-benchmark (Debian redis-tools)" >&2; exit 2; }
. scripts/own-redis.sh
own_redis_start box-gauge "$port"

n=20000
own_pin 5 "$own_rest"   # fixed, not own_client_pin: the thresholds were set with this client (CLIENT_PIN does not apply)
a=$(own_cpu)
"${PIN[@]}" redis-benchmark -p "$port" -n "$n" -c 1 -q PING >/dev/null
b=$(own_cpu)
ping_us=$(awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN {printf "%.1f", (b - a) * 1e6 / n}')

cc -O2 -o "$own_dir/stallprobe" scripts/stallprobe/stallprobe.c
own_pin 20 "$own_last"
"${PIN[@]}" "$own_dir/stallprobe" --duration "$secs" --period-us 250 --threshold-us 200 >"$own_dir/probe.json"

python3 - "$own_dir/probe.json" "$ping_us" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "${QUIET_PING_US:-20}" "${QUIET_STALLS:-20}" <<'PY'
import json, sys
probe, ping, load, max_ping, max_stalls = sys.argv[1], float(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
d = json.load(open(probe))
over_1ms = sum(1 for s in d["stalls"] if s["us"] >= 1000)
quiet = ping <= max_ping and over_1ms == 0 and d["stall_count"] <= max_stalls
print(json.dumps({"quiet": quiet, "ping_redis_cpu_us": ping, "stalls_over_200us": d["stall_count"],
                  "stalls_over_1ms": over_1ms, "stall_max_us": d["max_us"], "seconds": round(d["seconds"], 1),
                  "loadavg": load}))
sys.exit(0 if quiet else 1)
PY
