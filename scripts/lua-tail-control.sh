#!/usr/bin/env bash
# lua-tail-control.sh — the control for SLOWLOG tails: how often a Redis function of fixed work, with no
# kvrouter code, no Redis commands, no allocation (so no Lua garbage collection) and the length of a route
# call, takes over 1 ms on this machine. If it does at the rate route calls do, their tail is the
# machine's, not kvrouter's (docs/PERFORMANCE.md, "Fleet scale, 2026-12-02").
#
#   scripts/lua-tail-control.sh PORT [CALLS] [ITERATIONS]
#
# Starts its own redis-server on PORT (pinned to the last CPU at SCHED_FIFO 10 as root, as
# scripts/bench-tail.sh does), loads three functions and calls each CALLS times (default 60,000) from one
# redis-benchmark client pinned to the other CPU:
#   spin  — ITERATIONS (default 12,000, ~215 µs here) integer steps of arithmetic in a local: no allocation;
#   alloc — a twentieth as many string creations into a small table: garbage every call (Lua GC runs);
#   mem   — a hundredth as many GETs of random keys (Park–Miller steps from a per-call seed) in a space of
#           1 M names, ~864 k of them written first with 100-byte values by redis-benchmark (~167 MB): work that
#           misses the caches like a route call at 4,096 workers (~140 MB), which spin and alloc do not.
# Prints each one's mean time per call (commandstats) and its SLOWLOG calls over 1 ms with the longest.
# PROBE=1 runs scripts/bench-tail.sh's stall probe on Redis's CPU meanwhile, as bench-tail does.
set -euo pipefail
port="${1:?usage: scripts/lua-tail-control.sh PORT [CALLS] [ITERATIONS]}"
calls="${2:-60000}"
iters="${3:-12000}"
. "$(dirname "${BASH_SOURCE[0]}")/own-redis.sh"
own_redis_start lua-tail-control "$port" --slowlog-log-slower-than 1000 --slowlog-max-len 10000
# The same stall probe scripts/bench-tail.sh runs, so the controls and bench-tail's calls are preempted alike.
if [[ ${PROBE:-0} == 1 ]]; then own_probe_start "$own_dir/probe.json"; fi
own_client_pin   # as bench-tail.sh's client, which this controls for
redis-cli -p "$port" function load "#!lua name=kvrouter_tail_control
redis.register_function('tail_spin', function(keys, args)
  local n, x = tonumber(args[1]), 0
  for i = 1, n do x = (x * 31 + i) % 1000003 end
  return x
end)
redis.register_function('tail_alloc', function(keys, args)
  local n, t = tonumber(args[1]), {}
  for i = 1, n do t[i % 64 + 1] = 'k' .. i end
  return #t
end)
redis.register_function{function_name = 'tail_mem', flags = {'no-writes'}, callback = function(keys, args)
  local n, x, hit = tonumber(args[1]), tonumber(args[2]) % 2147483646 + 1, 0
  for _ = 1, n do
    x = (x * 16807) % 2147483647
    if redis.call('GET', string.format('key:%012d', x % 1000000)) then hit = hit + 1 end
  end
  return hit
end}" >/dev/null
"${CPIN[@]}" redis-benchmark -p "$port" -t set -r 1000000 -n 2000000 -d 100 -P 64 -c 1 -q >/dev/null 2>&1
echo "lua-tail-control: mem's keyspace $(redis-cli -p "$port" dbsize) keys, $(redis-cli -p "$port" info memory | grep -o 'used_memory_human:[^[:space:]]*'), a call's hits $(redis-cli -p "$port" fcall tail_mem 0 $((iters / 100)) 12345) of $((iters / 100))"
echo "lua-tail-control: $calls calls each, load $(cut -d' ' -f1-3 /proc/loadavg)"
for f in "tail_spin $iters" "tail_alloc $((iters / 20))" "tail_mem $((iters / 100)) __rand_int__"; do
  read -r name n seed <<<"$f"
  redis-cli -p "$port" slowlog reset >/dev/null
  redis-cli -p "$port" config resetstat >/dev/null
  "${CPIN[@]}" redis-benchmark -p "$port" -n "$calls" -c 1 -r 1000000000 -q FCALL "$name" 0 "$n" ${seed:+"$seed"} >/dev/null 2>&1
  mean=$(redis-cli -p "$port" info commandstats | grep -o 'cmdstat_fcall:.*usec_per_call=[0-9.]*' | grep -o '[0-9.]*$')
  summary=$(python3 "$(dirname "${BASH_SOURCE[0]}")/slowlog_summary.py" "$port" | grep "FCALL $name" || true)
  printf '%-11s %6s µs per call   calls over 1 ms: %s\n' "$name" "$mean" "${summary:-none}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
