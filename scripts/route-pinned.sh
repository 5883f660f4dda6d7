#!/usr/bin/env bash
# route-pinned.sh — `kvrouter bench route` against a redis-server of its own, pinned and prioritised exactly
# as scripts/redis-floor.sh pins the floor's (the last CPU, SCHED_FIFO 10, when run as root on ≥ 2 CPUs), the
# bench itself on the other CPUs as the floor's client (own-redis.sh own_client_pin; CLIENT_PIN=0: unpinned),
# so kvrouter's open-loop latency and the bare decision's are taken under the same conditions (SPEC §9's
# p50/p99 at half of saturation). Never touches a server it did not start; shuts it down at exit.
#
#   scripts/route-pinned.sh PORT [bench route flags…]
#   e.g. scripts/route-pinned.sh 7331 --workers 64 --blocks 1000000 --clients 1,16 --rate half --repeat 3 --duration 4s
#
# KVROUTER picks the binary (default bin/kvrouter); OWN_UNIX=1 routes over the server's Unix socket instead of
# loopback TCP (own-redis.sh). stdout is the bench's JSON, stderr its table and the
# load average before and after.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/route-pinned.sh PORT [bench route flags…]}
shift
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter
. scripts/own-redis.sh
own_redis_start route-pinned "$port"
own_client_pin
echo "route-pinned: load before $(cut -d' ' -f1-3 /proc/loadavg); client ${CPIN[*]:-unpinned}" >&2
"${CPIN[@]}" "$kvr" bench route --store "$own_url" "$@"
echo "route-pinned: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
