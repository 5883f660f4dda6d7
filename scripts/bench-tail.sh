#!/usr/bin/env bash
# bench-tail.sh — the tail of Redis calls under `kvrouter bench route`, with the machine's own stalls
# beside it (SPEC §8: every call < 1 ms of Redis time; issue 15: SLOWLOG-verified at 4,096 workers).
#
#   scripts/bench-tail.sh PORT [kvrouter bench route flags…]
#   e.g. scripts/bench-tail.sh 7320 --workers 4096 --blocks 1000000 --clients 1 --repeat 3 --duration 10s
#
# It starts its own redis-server on PORT (never one it did not start), pinned to the last CPU at
# real-time priority (SCHED_FIFO 10, so nothing else in the guest preempts it), runs the benchmark's
# client on the other CPUs with --slowlog-us 1000, and runs scripts/stallprobe.py on Redis's CPU at a
# higher real-time priority for the whole benchmark. Then it sets each call the client saw take ≥ 1 ms
# beside the probe's stalls: a call is "explained" when, without the stall time overlapping it, it would
# have taken < 1 ms — the CPU was taken from every task on it, not spent in the call. It prints, per run,
# the SLOWLOG entries of the pool's calls (server time) and that attribution, the probe's summary, and
# the whole server's SLOWLOG over the benchmark (index loading and calibration included) by command.
# Real-time priority and pinning need root (CAP_SYS_NICE); without it the script runs unpinned and says so.
# Output: JSON of the benchmark in $OUT (default /tmp/bench-tail-PORT.json), the probe's in $OUT.probe.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port="${1:?usage: scripts/bench-tail.sh PORT [bench route flags…]}"
shift
out="${OUT:-/tmp/bench-tail-$port.json}"
kvr="${KVROUTER:-bin/kvrouter}"
[[ -x "$kvr" ]] || go build -o "$kvr" ./cmd/kvrouter

if redis-cli -p "$port" ping >/dev/null 2>&1; then
  echo "bench-tail: something already listens on $port; pick a free port (this script only uses a Redis it starts)" >&2
  exit 2
fi
ncpu=$(nproc)
last=$((ncpu - 1))
rt=1
if [[ $(id -u) -ne 0 || $ncpu -lt 2 ]]; then
  rt=0
  echo "bench-tail: not root or a single CPU: running without pinning or real-time priority (stalls of the guest's own scheduler then count too)" >&2
fi
pin_redis=() pin_probe=() pin_client=()
if ((rt)); then
  pin_redis=(taskset -c "$last" chrt -f 10)
  pin_probe=(taskset -c "$last" chrt -f 20)
  pin_client=(taskset -c "0-$((last - 1))" chrt -f 5)
fi

dir=$(mktemp -d)
"${pin_redis[@]}" redis-server --port "$port" --save '' --appendonly no --daemonize yes \
  --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" --slowlog-max-len 4096
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
cleanup() {
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  [[ -n "${probe_pid:-}" ]] && kill "$probe_pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

# The probe: scripts/stallprobe/stallprobe.c built with cc (a wake-up costs a few µs), one wake-up per STALL_PERIOD_US
# (default 250 µs); without a compiler the Python one, every 1,000 µs by default (its wake-ups cost tens
# of µs: at 250 µs it took ~10 % of Redis's CPU and caused slow calls of its own).
probe=(python3 scripts/stallprobe.py --period-us "${STALL_PERIOD_US:-1000}")
if command -v cc >/dev/null && cc -O2 -o "$dir/stallprobe" scripts/stallprobe/stallprobe.c 2>/dev/null; then
  probe=("$dir/stallprobe" --period-us "${STALL_PERIOD_US:-250}" --threshold-us "${STALL_THRESHOLD_US:-200}")
fi
"${pin_probe[@]}" "${probe[@]}" >"$out.probe" &
probe_pid=$!

# The server logs calls over 1 ms for the whole benchmark (index loading included), and the index is kept
# (--prefix) rather than dropped key by key: the server is this script's and is shut down after.
redis-cli -p "$port" config set slowlog-log-slower-than 1000 >/dev/null
"${pin_client[@]}" "$kvr" bench route --store "redis://127.0.0.1:$port" --slowlog-us 1000 --prefix tail: "$@" >"$out"
kill -TERM "$probe_pid"
wait "$probe_pid" || true
probe_pid=

python3 scripts/tail_attribution.py "$out" "$out.probe"
echo "Whole benchmark (index loading, calibration and runs):"
python3 scripts/slowlog_summary.py "$port"
