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
#   their sum is a floor under SPEC §9's ≤ 30 µs for any design that books inside Redis · the least
#   decision that *chooses* (kvrouter_floor_min_route, 13 commands, and kvrouter_floor_min_done, 6: holders
#   and their shared prefix found, the candidates' loads read and costed, the minimum booked, released;
#   only the 5 and 4 keys they use, knobs as arguments, none of kvrouter's checks or features): the floor
#   under any design that decides inside Redis.
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
# OPENLOOP_FLOORS (default "bare min minbig") names the decisions driven that way: bare (route 11 + done 6
# commands), min (the least decision that chooses, one hot prompt) and minbig (the same over MIN_PROMPTS
# prompts, default 6,250: the route benchmark's 1 M entries, chains shared by 4, so its index probes meet
# cold caches as kvrouter's do); each run alternates route and done per client, so the min done finds its
# lease (redis-benchmark's rows run route and done in separate loops). mincmdbig (not in the default) is
# minbig plus the bookkeeping commands kvrouter issues beyond it: the commands' share of kvrouter's excess.
# nop and nopkeys (not in the default) are an FCALL that does nothing, without keys or with route's 26 and
# done's 13: driven at kvrouter's rate they time the client path and the machine alone.
set -euo pipefail
port="${1:?usage: scripts/redis-floor.sh PORT [REQUESTS]}"
n="${2:-50000}"
. "$(dirname "${BASH_SOURCE[0]}")/own-redis.sh"
own_redis_start redis-floor "$port"
redis-cli -p "$port" -x function load <"$(dirname "${BASH_SOURCE[0]}")/redis-floor/decision.lua" >/dev/null
redis-cli -p "$port" hset floor:h a 1 b 2 >/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/redis-floor/pools.sh"
own_client_pin   # clients (redis-benchmark, kvrouter bench floor) on the other CPUs (own-redis.sh; CLIENT_PIN=0: unpinned)
floor_setup "$port"
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
  measure "min route (13, deciding)" "$c" FCALL kvrouter_floor_min_route 5 "${min_keys[@]}" "${min_args[@]}"
  measure "min done (6)" "$c" FCALL kvrouter_floor_min_done 4 "${min_done_keys[@]}" "${min_done_args[@]}"
done
if [[ -n "${OPENLOOP:-}" ]]; then
  kvr="${KVROUTER:-$(dirname "${BASH_SOURCE[0]}")/../bin/kvrouter}"
  [[ -x "$kvr" ]] || (cd "$(dirname "${BASH_SOURCE[0]}")/.." && go build -o bin/kvrouter ./cmd/kvrouter)
  drive() { # floor
    floor_flags "$1" || exit 2
    # (bench floor settles before its first run, --settle: the fill and the rows above saturate the server.)
    "${CPIN[@]}" "$kvr" bench floor --store "$own_url" --rates "$OPENLOOP" --duration "${OPENLOOP_DURATION:-4s}" \
      "${FLOOR_FLAGS[@]}" ${OPENLOOP_FLAGS:-} >/dev/null
  }
  for f in ${OPENLOOP_FLOORS:-bare min minbig}; do
    case "$f" in
      bare) echo "open loop, bare decision (route latency from its scheduled time; done after it, outside the latency):" ;;
      min) echo "open loop, the minimal deciding decision (kvrouter_floor_min_route, then kvrouter_floor_min_done):" ;;
      minbig) echo "open loop, the minimal deciding decision over ${MIN_PROMPTS:-6250} prompts (kvrouter_floor_min_fill):" ;;
      mincmdbig) echo "open loop, minbig plus the commands kvrouter issues beyond it (kvrouter_floor_mincmd_*):" ;;
      nop) echo "open loop, an FCALL that does nothing (kvrouter_floor_nop, 0 keys; route and done alike):" ;;
      nopkeys) echo "open loop, an FCALL that does nothing with route's 26 keys and done's 13 (the client path alone):" ;;
      *) echo "redis-floor: OPENLOOP_FLOORS: unknown floor $f (bare, min, minbig, mincmdbig, nop, nopkeys)" >&2; exit 2 ;;
    esac
    case "$f" in minbig | mincmdbig) floor_setup_big "$port" ;; esac
    drive "$f"
  done
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
