# callgrind-redis.sh — sourced by scripts/redis-instr.sh and scripts/redis-percall.sh: a redis-server of the
# script's own under valgrind's callgrind, holding the index `kvrouter bench route --prefix instr:` builds.
# The index is loaded by a native server first (valgrind would take minutes), saved, and the server restarted
# from that RDB under callgrind with instrumentation off (callgrind_control -i on|off around what is counted).
#
#   cg_refuse_busy NAME PORT              # exit 2 when something listens on PORT (these scripts only use their own)
#   cg_start NAME PORT DIR KVROUTER [valgrind option…] -- [bench route flags…]
#                                         # sets cg_pid; the server is shut down at exit (trap)
#   cg_native NAME PORT DIR; …; cg_restart DIR [valgrind option…]
#                                         # the same around another set-up than bench route's index
#   cg_count DIR PID CMD…                 # CMD with instrumentation on: cg_instr, cg_ms, cg_file
#   cg_bench KVROUTER DECISIONS [bench route flags…]   # 1 client, no calibration, prefix instr:
#   cg_dump DIR PID                       # dump the counts so far, wait for the file, print its name
#   cg_total FILE                         # the instructions a dump counted
#   cg_idle DIR PID SECONDS               # the idle server's background instructions per second (serverCron at
#                                         # hz 10, the event loop: ~1.1 M/s under callgrind), counted that long
# REDIS_SERVER picks the binary (default redis-server).

cg_refuse_busy() {
  if redis-cli -p "$2" ping >/dev/null 2>&1; then
    echo "$1: something already listens on $2; pick a free port" >&2
    exit 2
  fi
}

# cg_up waits until the server answers PONG (not LOADING: the valgrind server loads the RDB slowly).
cg_up() { for _ in $(seq 1200); do [[ $(redis-cli -p "$cg_port" ping 2>/dev/null) == PONG ]] && return 0; sleep 0.5; done; echo "$cg_name: server on $cg_port not up" >&2; return 1; }

cg_bench() { "$1" bench route --store "redis://127.0.0.1:$cg_port" --prefix instr: --clients 1 --repeat 1 --calibrate 0 --routes "$2" "${@:3}"; }

cg_start() {
  local name=$1 port=$2 dir=$3 kvr=$4
  shift 4
  local vg=()
  while [[ $# -gt 0 && $1 != -- ]]; do vg+=("$1"); shift; done
  [[ $# -gt 0 ]] && shift
  cg_native "$name" "$port" "$dir"
  cg_bench "$kvr" 10 "$@" >/dev/null 2>&1
  cg_restart "$dir" "${vg[@]}"
}

# cg_native NAME PORT DIR: a native server of the script's own on PORT (shut down at exit), for the state to
# be built fast; cg_restart DIR [valgrind option…] then saves it and restarts from that RDB under callgrind
# with instrumentation off, setting cg_pid. cg_start is the two around `bench route`'s index load.
cg_native() {
  cg_name=$1 cg_port=$2
  trap 'redis-cli -p "$cg_port" shutdown nosave >/dev/null 2>&1 || true' EXIT
  "${REDIS_SERVER:-redis-server}" --port "$cg_port" --save '' --appendonly no --daemonize yes --dir "$3" --logfile "$3/load.log"
  cg_up
}
cg_restart() {
  local dir=$1
  shift
  redis-cli -p "$cg_port" save >/dev/null
  redis-cli -p "$cg_port" shutdown nosave >/dev/null 2>&1 || true
  sleep 1
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/cg.%p" "$@" \
    "${REDIS_SERVER:-redis-server}" --port "$cg_port" --save '' --appendonly no --dir "$dir" --dbfilename dump.rdb >"$dir/valgrind.log" 2>&1 &
  cg_up
  cg_pid=$(redis-cli -p "$cg_port" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
}

cg_ndumps() { { compgen -G "$1/cg.$2.*" || true; } | wc -l; }   # DIR PID: the dumps so far (cg.PID.1, .2, …)

cg_dump() {
  local before
  before=$(cg_ndumps "$1" "$2")
  callgrind_control -d "$2" >/dev/null 2>&1
  for _ in $(seq 100); do (($(cg_ndumps "$1" "$2") > before)) && break; sleep 0.2; done
  ls -t "$1"/cg."$2".* | head -1
}

cg_total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'; }

# cg_count DIR PID CMD…: runs CMD (its stdout kept) with instrumentation on; sets cg_instr (the instructions
# Redis executed meanwhile), cg_ms (the window's wall milliseconds) and cg_file (its dump).
cg_count() {
  local dir=$1 pid=$2 t0 t1
  shift 2
  callgrind_control -z "$pid" >/dev/null 2>&1
  t0=$(date +%s%N)
  callgrind_control -i on "$pid" >/dev/null 2>&1
  "$@"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  t1=$(date +%s%N)
  cg_file=$(cg_dump "$dir" "$pid")
  cg_instr=$(cg_total "$cg_file")
  cg_ms=$(((t1 - t0) / 1000000))
}

cg_idle() {
  cg_count "$1" "$2" sleep "$3"
  echo $((cg_instr * 1000 / cg_ms))
}
