#!/usr/bin/env bash
# bench-tail.sh — the tail of Redis calls under `kvrouter bench route`, with the machine's own stalls
# beside it (SPEC §8: every call < 1 ms of Redis time; issue 15: SLOWLOG-verified at 4,096 workers).
#
#   scripts/bench-tail.sh PORT [kvrouter bench route flags…]
#   e.g. scripts/bench-tail.sh 7320 --workers 4096 --blocks 1000000 --clients 1 --repeat 3 --duration 10s
#
# It starts its own redis-server on PORT (never one it did not start), pinned to the last CPU at
# real-time priority (SCHED_FIFO 10, so nothing else in the guest preempts it), runs the benchmark's
# client on the other CPUs with --slowlog-us 1000, and runs scripts/stallprobe/stallprobe.c (built with cc)
# on Redis's CPU at a higher real-time priority for the benchmark proper. Then it sets each call the client saw take ≥ 1 ms
# beside the probe's stalls: a call is "explained" when, without the stall time overlapping it, it would
# have taken < 1 ms — the CPU was taken from every task on it, not spent in the call. It prints, per run,
# the SLOWLOG entries of the pool's calls (server time) and that attribution, the probe's summary, and
# the server's SLOWLOG by command for the index loading (a run of its own, the server unthrottled: see
# below) and for the benchmark after it (calibration included).
# Real-time priority and pinning need root (CAP_SYS_NICE); without it the script runs unpinned and says so.
# With --rate, every open-loop call goes to $OUT.calls (`bench route --calls-out`) and scripts/tail_bursts.py
# prints the tail's bursts and what each slow call coincided with; CLIENT_PROBE=1 also runs a probe on the
# client's CPUs at the client's own class (own-redis.sh own_client_probe_start), its JSON in $OUT.cprobe.
# Output: JSON of the benchmark in $OUT (default /tmp/bench-tail-PORT.json), the probe's in $OUT.probe.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port="${1:?usage: scripts/bench-tail.sh PORT [bench route flags…]}"
shift
out="${OUT:-/tmp/bench-tail-$port.json}"
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter

. scripts/own-redis.sh
own_redis_start bench-tail "$port" --slowlog-max-len 4096
# The server logs calls over 1 ms for the whole benchmark, and the index is kept (--prefix) rather than
# dropped key by key: the server is this script's and is shut down after.
redis-cli -p "$port" config set slowlog-log-slower-than 1000 >/dev/null
own_client_pin

# Index loading first, in a run of its own (one decision; the flags given, then these), with the server at
# SCHED_OTHER: loading keeps Redis 100 % busy, and a SCHED_FIFO task that busy is stopped by the kernel's
# real-time throttling (sched_rt_runtime_us: 950 ms per second) for ~50 ms at a time, which the SLOWLOG then
# shows as ~50-ms ingest calls that say nothing about the calls. Its SLOWLOG is printed and reset; the
# benchmark proper then finds the index under the prefix and runs with the server back at SCHED_FIFO 10.
rpid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '/^process_id:/ { print $2 }')
if ((own_rt)); then chrt -a -o -p 0 "$rpid"; fi
"${CPIN[@]}" "$kvr" bench route --store "$own_url" --prefix tail: "$@" \
  --repeat 1 --clients 1 --routes 1 --calibrate 0 --rate '' >/dev/null 2>"$out.load" ||
  { echo "bench-tail: loading the index failed:" >&2; cat "$out.load" >&2; exit 1; }
echo "Index loading (server at SCHED_OTHER, no real-time throttling; the stall probe not running):"
python3 scripts/slowlog_summary.py "$port"
redis-cli -p "$port" slowlog reset >/dev/null
if ((own_rt)); then chrt -a -f -p 10 "$rpid"; fi

# The probe on Redis's CPU above Redis's priority (own-redis.sh: one wake-up per STALL_PERIOD_US).
own_probe_start "$out.probe"
if [[ "${CLIENT_PROBE:-0}" == 1 ]]; then own_client_probe_start "$out.cprobe"; fi
"${CPIN[@]}" "$kvr" bench route --store "$own_url" --slowlog-us 1000 --prefix tail: --calls-out "$out.calls" "$@" >"$out"
own_probe_stop

python3 scripts/tail_attribution.py "$out" "$out.probe"
if [[ -s "$out.calls" && $(wc -l <"$out.calls") -gt 1 ]]; then
  echo "Open-loop calls in time (scripts/tail_bursts.py):"
  cprobe=()
  if [[ "${CLIENT_PROBE:-0}" == 1 ]]; then cprobe=(--client-probe "$out.cprobe"); fi
  python3 scripts/tail_bursts.py "$out.calls" --server-probe "$out.probe" "${cprobe[@]}" --show 5
fi
echo "The benchmark after loading (calibration and runs):"
python3 scripts/slowlog_summary.py "$port"
