# own-redis.sh — sourced by scripts/bench-tail.sh, redis-floor.sh and lua-tail-control.sh: a redis-server of
# the script's own on a free port, pinned to the last CPU at SCHED_FIFO 10 when run as root on ≥ 2 CPUs (so
# nothing else in the guest preempts it), shut down and its temp dir removed at exit. Those scripts never
# touch a server they did not start.
#
#   own_redis_start NAME PORT [redis-server flags…]   # refuses a port in use; sets own_dir, own_url; traps EXIT
#   own_pin PRIO CPUS                                   # sets PIN=(taskset -c CPUS chrt -f PRIO), or () without root
#   own_server_pin                                      # sets SPIN for a server: the last CPU, SCHED_FIFO 10 (own_redis_start's)
#   own_client_pin                                      # sets CPIN for the benchmark's client: the other CPUs (see there)
#   own_last / own_rest                                 # the last CPU / the others, for own_pin
#   own_cpu                                             # prints the server's Redis CPU seconds (INFO user + sys)
#   own_probe_start FILE / own_probe_stop               # the stall probe on the server's CPU, its JSON to FILE
#   own_client_probe_start FILE                         # … and one on the client's CPUs at the client's class
# SERVER_CPU and CLIENT_CPUS move the server (default the last CPU) and the client (default the others), e.g.
# SERVER_CPU=0 CLIENT_CPUS=1 to swap them.
# REDIS_SERVER picks the server binary (default: redis-server on PATH; e.g. a build with symbols or a
# diagnostic build); OWN_LOG=FILE keeps a copy of the server's log at exit. OWN_UNIX=1 has the server listen on
# a Unix socket in own_dir as well and sets own_url (the URL every script that sources this file hands
# kvrouter) to it instead of redis://127.0.0.1:PORT: a router beside its Redis (docs/REDIS.md "Connecting");
# redis-cli still uses the port.

own_rt=0
if [[ $(id -u) -eq 0 && $(nproc) -ge 2 ]]; then own_rt=1; fi
own_last=${SERVER_CPU:-$(($(nproc) - 1))}
own_rest=${CLIENT_CPUS:-"0-$((own_last > 0 ? own_last - 1 : 0))"}

# own_cpu prints the own server's used_cpu_user + used_cpu_sys (INFO cpu), seconds: a delta over a run is
# the Redis CPU the run cost (parsing and replies included, which commandstats omits).
own_cpu() { redis-cli -p "$own_port" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }

own_pin() {
  PIN=()
  if ((own_rt)); then PIN=(taskset -c "$2" chrt -f "$1"); fi
}

# own_server_pin sets SPIN, the prefix every script's redis-server runs under: the last CPU at SCHED_FIFO 10,
# so nothing else in the guest preempts it (own_redis_start uses it; ingest-floor.sh, which starts a server
# per row itself, too).
own_server_pin() {
  own_pin 10 "$own_last"
  SPIN=("${PIN[@]}")
}

# own_client_pin sets CPIN, the prefix that runs a benchmark's client (kvrouter bench, redis-benchmark) the way
# a router runs beside its Redis in a deployment: on CPUs of its own — here the ones the server is not pinned
# to (own_rest), at nice -10 — as bench-tail.sh and churn-tail.sh always did (they call it too). Go sizes
# GOMAXPROCS from that affinity (1 on a 2-CPU box). An unpinned client also runs threads on the server's
# CPU, where the server at real-time priority preempts them whenever it works; on this VM that added
# 38-55 µs to a 16-client open-loop p50 and multiplied the p99s (docs/PERFORMANCE.md "Nineteenth session").
# The client runs at SCHED_OTHER, not real-time: an open-loop client spinning before each send
# (`--spin-tail`) at 7–8 k decisions/s keeps its CPU 100 % busy, and the kernel's real-time throttling
# (sched_rt_runtime_us: 950 ms per 1-s period) then stopped it ~50 ms once a second — a 16-client
# open-loop p99 of 28 ms that was the generator's, not the store's (docs/PERFORMANCE.md "Twenty-fifth
# session"). CLIENT_PIN=rt keeps the SCHED_FIFO 5 client of the nineteenth to twenty-fourth sessions (to
# reproduce their figures); CLIENT_PIN=0 leaves it unpinned, as before them. For a p99 reading prefer
# CLIENT_PIN=rt: on this VM a SCHED_OTHER client's own CPU stalls for ms 12–20 times a second and most of
# its tail is those stalls (p99 1.2–1.9 ms against 0.6–0.7 at 64 workers, 16 clients; docs/PERFORMANCE.md
# "Twenty-sixth session"), while with the 50-µs spin tail the real-time client was stopped (20–30 ms) in 2 of
# 13 runs. It stays off by default for the client-bound rates (the bare decision's open loop), where a
# real-time client that cannot keep up would be throttled every second. box-gauge.sh keeps its own
# fixed pin: a gauge, not a benchmark.
own_client_pin() {
  CPIN=()
  ((own_rt)) || return 0
  case ${CLIENT_PIN:-1} in
    0) ;;
    rt) CPIN=(taskset -c "$own_rest" chrt -f 5) ;;
    *) CPIN=(taskset -c "$own_rest" nice -n -10) ;;
  esac
}

# own_cleanup shuts the server down and removes own_dir; a script with more to clean calls it from its own
# EXIT trap.
own_cleanup() {
  redis-cli -p "$own_port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n "${OWN_LOG:-}" ]]; then cp "$own_dir/redis.log" "$OWN_LOG" || true; fi
  rm -rf "$own_dir"
}

# own_probe_start runs scripts/stallprobe/stallprobe.c (built with cc; a wake-up costs a few µs) on the
# server's CPU above the server's priority, one wake-up per STALL_PERIOD_US (default 250 µs), stalls over
# STALL_THRESHOLD_US (default 200) to FILE; the EXIT trap stops it before the server. Changes PIN.
own_probe_start() {
  command -v cc >/dev/null || { echo "own-redis: the stall probe needs a C compiler (cc)" >&2; exit 2; }
  cc -O2 -o "$own_dir/stallprobe" "$(dirname "${BASH_SOURCE[0]}")/stallprobe/stallprobe.c"
  own_pin 20 "$own_last"
  "${PIN[@]}" "$own_dir/stallprobe" --period-us "${STALL_PERIOD_US:-250}" --threshold-us "${STALL_THRESHOLD_US:-200}" >"$1" &
  own_probe_pid=$!
  trap 'own_probe_stop; own_cleanup' EXIT
}

# own_client_probe_start runs a second probe (after own_probe_start, which builds it) on the client's CPUs at the
# client's own class (CPIN: SCHED_OTHER nice -10 by default), its JSON to FILE: a stall there is time the
# client's threads could not have run either — on this VM a SCHED_OTHER task on CPU 0 wakes ≥ 0.5 ms late
# 12–20 times a second while a SCHED_FIFO one does ~once (docs/PERFORMANCE.md "Twenty-sixth session"). Each
# wake-up takes a few µs of the client's CPU. own_probe_stop stops it too.
own_client_probe_start() {
  "${CPIN[@]}" "$own_dir/stallprobe" --period-us "${STALL_PERIOD_US:-250}" --threshold-us "${STALL_THRESHOLD_US:-200}" >"$1" &
  own_cprobe_pid=$!
}

# own_probe_stop stops the probes (each writes its summary on SIGTERM) and waits for them.
own_probe_stop() {
  local p
  for p in "${own_probe_pid:-}" "${own_cprobe_pid:-}"; do
    [[ -n "$p" ]] || continue
    kill -TERM "$p" 2>/dev/null || true
    wait "$p" || true
  done
  own_probe_pid= own_cprobe_pid=
}

own_redis_start() {
  local name=$1
  own_port=$2
  shift 2
  if redis-cli -p "$own_port" ping >/dev/null 2>&1; then
    echo "$name: something already listens on $own_port; pick a free port (this script only uses a Redis it starts)" >&2
    exit 2
  fi
  if ((!own_rt)); then
    echo "$name: not root or a single CPU: running without pinning or real-time priority" >&2
  fi
  own_dir=$(mktemp -d)
  trap own_cleanup EXIT
  own_server_pin
  own_url=redis://127.0.0.1:$own_port
  local unix=()
  if [[ ${OWN_UNIX:-0} == 1 ]]; then
    unix=(--unixsocket "$own_dir/redis.sock" --unixsocketperm 700)
    own_url=unix://$own_dir/redis.sock
  fi
  "${SPIN[@]}" "${REDIS_SERVER:-redis-server}" --port "$own_port" --save '' --appendonly no --daemonize yes \
    --logfile "$own_dir/redis.log" "${unix[@]}" "$@"
  for _ in $(seq 50); do redis-cli -p "$own_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
