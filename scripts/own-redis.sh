# own-redis.sh — sourced by scripts/bench-tail.sh, redis-floor.sh and lua-tail-control.sh: a redis-server of
# the script's own on a free port, pinned to the last CPU at SCHED_FIFO 10 when run as root on ≥ 2 CPUs (so
# nothing else in the guest preempts it), shut down and its temp dir removed at exit. Those scripts never
# touch a server they did not start.
#
#   own_redis_start NAME PORT [redis-server flags…]   # refuses a port in use; sets own_dir; traps EXIT
#   own_pin PRIO CPUS                                   # sets PIN=(taskset -c CPUS chrt -f PRIO), or () without root
#   own_last / own_rest                                 # the last CPU / the others, for own_pin
#   own_cpu                                             # prints the server's Redis CPU seconds (INFO user + sys)
# REDIS_SERVER picks the server binary (default: redis-server on PATH; e.g. a build with symbols or a
# diagnostic build); OWN_LOG=FILE keeps a copy of the server's log at exit.

own_rt=0
if [[ $(id -u) -eq 0 && $(nproc) -ge 2 ]]; then own_rt=1; fi
own_last=$(($(nproc) - 1))
own_rest="0-$((own_last > 0 ? own_last - 1 : 0))"

# own_cpu prints the own server's used_cpu_user + used_cpu_sys (INFO cpu), seconds: a delta over a run is
# the Redis CPU the run cost (parsing and replies included, which commandstats omits).
own_cpu() { redis-cli -p "$own_port" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'; }

own_pin() {
  PIN=()
  if ((own_rt)); then PIN=(taskset -c "$2" chrt -f "$1"); fi
}

# own_cleanup shuts the server down and removes own_dir; a script with more to clean calls it from its own
# EXIT trap.
own_cleanup() {
  redis-cli -p "$own_port" shutdown nosave >/dev/null 2>&1 || true
  if [[ -n "${OWN_LOG:-}" ]]; then cp "$own_dir/redis.log" "$OWN_LOG" || true; fi
  rm -rf "$own_dir"
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
  own_pin 10 "$own_last"
  "${PIN[@]}" "${REDIS_SERVER:-redis-server}" --port "$own_port" --save '' --appendonly no --daemonize yes \
    --logfile "$own_dir/redis.log" "$@"
  for _ in $(seq 50); do redis-cli -p "$own_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
}
