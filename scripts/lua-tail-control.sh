#!/usr/bin/env bash
# lua-tail-control.sh — the control for SLOWLOG tails: how often a Redis function of fixed work, with no
# kvrouter code, no Redis commands, no allocation (so no Lua garbage collection) and the length of a route
# call, takes over 1 ms on this machine. If it does at the rate route calls do, their tail is the
# machine's, not kvrouter's (docs/PERFORMANCE.md, "Fleet scale, 2026-12-02").
#
#   scripts/lua-tail-control.sh PORT [CALLS] [ITERATIONS]
#
# Starts its own redis-server on PORT (pinned to the last CPU at SCHED_FIFO 10 as root, as
# scripts/bench-tail.sh does), loads two functions and calls each CALLS times (default 60,000) from one
# redis-benchmark client pinned to the other CPU:
#   spin  — ITERATIONS (default 12,000, ~215 µs here) integer steps of arithmetic in a local: no allocation;
#   alloc — a twentieth as many string creations into a small table: garbage every call (Lua GC runs).
# Prints each one's mean time per call (commandstats) and its SLOWLOG calls over 1 ms with the longest.
set -euo pipefail
port="${1:?usage: scripts/lua-tail-control.sh PORT [CALLS] [ITERATIONS]}"
calls="${2:-60000}"
iters="${3:-12000}"
. "$(dirname "${BASH_SOURCE[0]}")/own-redis.sh"
own_redis_start lua-tail-control "$port" --slowlog-log-slower-than 1000 --slowlog-max-len 10000
own_pin 5 "$own_rest"
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
end)" >/dev/null
echo "lua-tail-control: $calls calls each, load $(cut -d' ' -f1-3 /proc/loadavg)"
for f in "tail_spin $iters" "tail_alloc $((iters / 20))"; do
  read -r name n <<<"$f"
  redis-cli -p "$port" slowlog reset >/dev/null
  redis-cli -p "$port" config resetstat >/dev/null
  "${PIN[@]}" redis-benchmark -p "$port" -n "$calls" -c 1 -q FCALL "$name" 0 "$n" >/dev/null 2>&1
  mean=$(redis-cli -p "$port" info commandstats | grep -o 'cmdstat_fcall:.*usec_per_call=[0-9.]*' | grep -o '[0-9.]*$')
  summary=$(python3 "$(dirname "${BASH_SOURCE[0]}")/slowlog_summary.py" "$port" | grep "FCALL $name" || true)
  printf '%-11s %6s µs per call   calls over 1 ms: %s\n' "$name" "$mean" "${summary:-none}"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
