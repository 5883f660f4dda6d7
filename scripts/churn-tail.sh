#!/usr/bin/env bash
# churn-tail.sh — `kvrouter bench churn` (removals, registrations and the decisions after each, a fresh
# server's cold Lua VM first) against a redis-server of its own, pinned as the other tail scripts pin theirs,
# with SLOWLOG at 1 ms over the measured calls: issue 15's "every call < 1 ms" for the calls `bench route`
# never makes. Judge it only in a quiet window (scripts/box-gauge.sh); in instructions, scripts/roster-percall.sh.
#
#   scripts/churn-tail.sh PORT [bench churn flags…]     # e.g. scripts/churn-tail.sh 7341 --workers 4096
#
# KVROUTER picks the binary (default bin/kvrouter). stdout is the bench's JSON, stderr its table.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/churn-tail.sh PORT [bench churn flags…]}
shift
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter
. scripts/own-redis.sh
own_redis_start churn-tail "$port"
own_client_pin
echo "churn-tail: load before $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"${CPIN[@]}" "$kvr" bench churn --store "$own_url" --slowlog-us 1000 "$@"
echo "churn-tail: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
