#!/usr/bin/env bash
# redis-floor.sh — the Redis CPU a request costs on this machine before any kvrouter work: the floor
# under SPEC §9's per-decision target (a decision is two requests, route then done, each an FCALL with
# the pool's 26 keys).
#
#   scripts/redis-floor.sh PORT [REQUESTS]
#
# Starts its own redis-server on PORT (never one it did not start; pinned to the last CPU at real-time
# priority when run as root, like scripts/bench-tail.sh), loads a one-function library whose function
# returns at once, and measures with redis-benchmark, for 1 and 16 clients, the Redis CPU per request
# (INFO used_cpu_user + used_cpu_sys delta over the run / requests, as `kvrouter bench` does) of:
#   PING · HGET of a small hash · FCALL of the no-op with 0 keys · FCALL of the no-op with 26 keys
#   (the length of kvrouter's key list, names as long as a pool's) · the least a booked decision does
#   in Redis, route (11 commands) and done (6), with none of kvrouter's logic (redis-floor/decision.lua):
#   their sum is a floor under SPEC §9's ≤ 30 µs for any design that books inside Redis.
# Prints one line per (request, clients) and the load average.
# OPENLOOP=R1,R2,… then drives the bare decision open loop at those decisions/s (`kvrouter bench floor`:
# the schedule and clock of `kvrouter bench route --rate`; KVROUTER picks the binary, default bin/kvrouter),
# route's latency p50/p99 from its scheduled time: the floor under SPEC §9's end-to-end latency targets at
# the same rates (OPENLOOP_DURATION, default 4s; 3 runs per rate; OPENLOOP_FLAGS, e.g. '--spin-tail 0',
# go to `kvrouter bench floor` as they are). OPENLOOP=half drives it as `bench route --clients 1,16 --rate half`
# drives kvrouter: closed loop at 1 and 16 clients (OPENLOOP_FLAGS='--clients N,…' for others), then open
# loop at half of what each made — the floor at half of its own saturation. Clients run pinned off Redis's
# CPU (own-redis.sh own_client_pin): on a 2-CPU box that is one client CPU, which drives the bare decision's
# 16-client closed loop (~35 k/s) but not its open loop at half of it (~17 k/s from 64 senders: the
# generator falls behind, p99 in tens of ms) — at 16 clients that open-loop figure is the client's limit,
# not a floor (docs/PERFORMANCE.md "Nineteenth session"); its 1-client figures and the Redis CPU rows are.
set -euo pipefail
port="${1:?usage: scripts/redis-floor.sh PORT [REQUESTS]}"
n="${2:-50000}"
. "$(dirname "${BASH_SOURCE[0]}")/own-redis.sh"
own_redis_start redis-floor "$port"
redis-cli -p "$port" -x function load <"$(dirname "${BASH_SOURCE[0]}")/redis-floor/decision.lua" >/dev/null
redis-cli -p "$port" hset floor:h a 1 b 2 >/dev/null
keys=() done_keys=()
# Key names as long as `kvrouter bench route`'s since layout 6 (its fresh prefix and pool name in the tag).
tag="kvr:r01234567:{=w64-c64-k4-e1000000}"
for k in cfg ro wk seen lv fence sc orph nd dead ls lx ss sx e: g: s: wz hc hu sy lz lc sz lp tc; do
  keys+=("$tag:$k")
done
for k in lv ls sx lz cfg ro wk seen fence sc hc hu lc; do
  done_keys+=("$tag:$k")
done
prompt=$(head -c 256 /dev/urandom | od -An -tx1 | tr -d ' \n')   # 512 printable bytes: 64 blocks of 8
lease=lease-0001 member=$(printf '%024d' 7)   # the lease route books and done ends; a load-order member
route_args=("$prompt" "$lease" "$(printf 'l%.0s' {1..60})" 1796220000000 "$member")
for i in $(seq 14); do route_args+=(""); done
own_client_pin   # clients (redis-benchmark, kvrouter bench floor) on the other CPUs (own-redis.sh; CLIENT_PIN=0: unpinned)
redis-cli -p "$port" fcall kvrouter_floor_setup 26 "${keys[@]}" "$prompt" >/dev/null
measure() { # name clients cmd…
  local name=$1 c=$2
  shift 2
  local a b
  a=$(own_cpu)
  "${CPIN[@]}" redis-benchmark -p "$port" -n "$n" -c "$c" -q "$@" >/dev/null 2>&1
  b=$(own_cpu)
  awk -v a="$a" -v b="$b" -v n="$n" -v name="$name" -v c="$c" \
    'BEGIN { printf "%-28s clients %-3s %7.2f µs of Redis CPU per request\n", name, c, (b - a) / n * 1e6 }'
}
echo "redis-floor: $(redis-server --version | awk '{print $3}'), $n requests each, load $(cut -d' ' -f1-3 /proc/loadavg), client ${CPIN[*]:-unpinned}"
for c in 1 16; do
  measure PING "$c" PING
  measure "HGET (small hash)" "$c" HGET floor:h a
  measure "FCALL no-op, 0 keys" "$c" FCALL kvrouter_floor_nop 0
  measure "FCALL no-op, 26 keys" "$c" FCALL kvrouter_floor_nop 26 "${keys[@]}"
  measure "floor route (11 commands)" "$c" FCALL kvrouter_floor_route 26 "${keys[@]}" "${route_args[@]}"
  measure "floor done (6 commands)" "$c" FCALL kvrouter_floor_done 13 "${done_keys[@]}" "$lease" "$member"
done
if [[ -n "${OPENLOOP:-}" ]]; then
  echo "open loop, bare decision (route latency from its scheduled time; done after it, outside the latency):"
  kvr="${KVROUTER:-$(dirname "${BASH_SOURCE[0]}")/../bin/kvrouter}"
  [[ -x "$kvr" ]] || (cd "$(dirname "${BASH_SOURCE[0]}")/.." && go build -o bin/kvrouter ./cmd/kvrouter)
  join1f() { local IFS=$'\x1f'; echo "$*"; }
  "${CPIN[@]}" "$kvr" bench floor --store "redis://127.0.0.1:$port" --rates "$OPENLOOP" --duration "${OPENLOOP_DURATION:-4s}" \
    --route-keys "$(join1f "${keys[@]}")" --route-args "$(join1f "${route_args[@]}")" \
    --done-keys "$(join1f "${done_keys[@]}")" --done-args "$(join1f "$lease" "$member")" ${OPENLOOP_FLAGS:-} >/dev/null
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
