#!/usr/bin/env bash
# floor-instr.sh — Redis instructions per decision (route + done) of the floors in scripts/redis-floor/
# decision.lua, counted by valgrind's callgrind: the load-independent companion of scripts/redis-floor.sh's
# Redis CPU figures, and of scripts/redis-instr.sh's for kvrouter (the same counting, so the three compare).
#
#   scripts/floor-instr.sh PORT [DECISIONS [FLOORS]]
#   e.g. scripts/floor-instr.sh 7352 1000 "bare min minbig"
#
# It starts its own redis-server on PORT (never one it did not start), loads the floor library and sets up
# the floors' pools as redis-floor.sh does (minbig: MIN_PROMPTS prompts, default 6,250 = 1 M entries, filled
# natively; the runs under valgrind route them with `bench floor --no-fill`), saves, and restarts the server from that RDB under `valgrind --tool=callgrind
# --instr-atstart=no`. Then for each floor of FLOORS (default "bare min minbig"; also mincmdbig, and nop /
# nopkeys: a route and a done that return at once, with no keys / with the bare decision's 26 and 13): ~200 warm-up
# decisions, then ~DECISIONS (default 1,000) with instrumentation on, driven by `kvrouter bench floor` open loop
# (one client's pace: the generator sends each route, then its done; rate DECISIONS/25 per second under
# valgrind's slowness), divided by the FCALLs Redis counted (commandstats: route + done = 2 per decision).
# Printed: instructions per decision, per floor. KVROUTER picks the binary (default bin/kvrouter); REDIS_SERVER
# the server (default redis-server; FLOOR_LIB the library file, default scripts/redis-floor/decision.lua; a build with symbols for callgrind_annotate of the kept files, $OUT_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/floor-instr.sh PORT [DECISIONS [FLOORS]]}
n=${2:-1000}
floors=${3:-bare min minbig}
kvr=${KVROUTER:-bin/kvrouter}
[[ -x $kvr ]] || go build -o bin/kvrouter ./cmd/kvrouter
command -v valgrind >/dev/null || { echo "floor-instr: needs valgrind (apt-get install valgrind)" >&2; exit 2; }
. scripts/callgrind-redis.sh
cg_refuse_busy floor-instr "$port"
dir=${OUT_DIR:-$(mktemp -d /tmp/floor-instr.XXXXXX)}
mkdir -p "$dir"
srv=${REDIS_SERVER:-redis-server}
cg_name=floor-instr cg_port=$port
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true' EXIT

# The floors' keys and arguments, as scripts/redis-floor.sh builds them (same names, same lengths).
keys=() done_keys=()
tag="kvr:r01234567:{=w64-c64-k4-e1000000}"
for k in cfg ro wk seen lv fence sc orph nd dead ls lx ss sx e: g: s: wz hc hu sy lz lc sz lp tc; do keys+=("$tag:$k"); done
for k in lv ls sx lz cfg ro wk seen fence sc hc hu lc; do done_keys+=("$tag:$k"); done
prompt=$(head -c 256 /dev/urandom | od -An -tx1 | tr -d ' \n')
mtag="kvr:r01234567:{=m64-c64-k4-e1000000}" btag="kvr:r01234567:{=n64-c64-k4-e1000000}"
min_keys=("$mtag:e:" "$mtag:lv" "$mtag:lz" "$mtag:ls" "$mtag:lx") min_done_keys=("$mtag:lv" "$mtag:lz" "$mtag:ls" "$mtag:lx")
big_keys=("$btag:e:" "$btag:lv" "$btag:lz" "$btag:ls" "$btag:lx") big_done_keys=("$btag:lv" "$btag:lz" "$btag:ls" "$btag:lx")
cmd_keys=("${big_keys[@]}" "$btag:cfg" "$btag:sc" "$btag:lp" "$btag:dead" "$btag:sx" "$btag:sy" "$btag:orph" "$btag:nd" "$btag:hu")
cmd_done_keys=("${big_done_keys[@]}" "$btag:cfg" "$btag:sc" "$btag:lp")
lease=lease-0001 member=$(printf '%024d' 7)
route_args=("$prompt" "$lease" "$(printf 'l%.0s' {1..60})" 1796220000000 "$member")
for i in $(seq 14); do route_args+=(""); done
min_args=("$prompt" "$lease" 1796220000000 1024 16 1 1) min_done_args=("$lease" 1 1 16)
nofill=   # --no-fill once the RDB holds minbig's prompts (filled natively below, not under valgrind)
join1f() { local IFS=$'\x1f'; echo "$*"; }
# drive SECONDS RATE route-fn done-fn prompts route-keys route-args done-keys done-args
drive() {
  "$kvr" bench floor --store "redis://127.0.0.1:$port" --rates "$2" --duration "$1s" --repeat 1 --senders 1 --spin-tail 0 $nofill \
    --route-fn "$3" --done-fn "$4" --prompts "$5" --route-keys "$6" --route-args "$7" --done-keys "$8" --done-args "$9" >/dev/null 2>>"$dir/drive.err"
}
floor_drive() { # SECONDS RATE FLOOR
  case "$3" in
    bare) drive "$1" "$2" kvrouter_floor_route kvrouter_floor_done 0 "$(join1f "${keys[@]}")" "$(join1f "${route_args[@]}")" \
      "$(join1f "${done_keys[@]}")" "$(join1f "$lease" "$member")" ;;
    min) drive "$1" "$2" kvrouter_floor_min_route kvrouter_floor_min_done 0 "$(join1f "${min_keys[@]}")" "$(join1f "${min_args[@]}")" \
      "$(join1f "${min_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    minbig) drive "$1" "$2" kvrouter_floor_min_route kvrouter_floor_min_done "${MIN_PROMPTS:-6250}" "$(join1f "${big_keys[@]}")" \
      "$(join1f "${min_args[@]}")" "$(join1f "${big_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    mincmdbig) drive "$1" "$2" kvrouter_floor_mincmd_route kvrouter_floor_mincmd_done "${MIN_PROMPTS:-6250}" "$(join1f "${cmd_keys[@]}")" \
      "$(join1f "${min_args[@]}")" "$(join1f "${cmd_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    nop) drive "$1" "$2" kvrouter_floor_nop kvrouter_floor_nop 0 "" "" "" "" ;;
    nopkeys) drive "$1" "$2" kvrouter_floor_nop kvrouter_floor_nop 0 "$(join1f "${keys[@]}")" "" "$(join1f "${done_keys[@]}")" "" ;;
    *) echo "floor-instr: unknown floor $3 (bare, min, minbig, mincmdbig, nop, nopkeys)" >&2; exit 2 ;;
  esac
}
fcalls() { redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' '$1 == "cmdstat_fcall" {print $3}'; }

# Natively: the library, every floor's pool, minbig's prompts (one short run fills them), saved.
"$srv" --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" --logfile "$dir/load.log"
cg_up
redis-cli -p "$port" -x function load <"${FLOOR_LIB:-scripts/redis-floor/decision.lua}" >/dev/null
redis-cli -p "$port" fcall kvrouter_floor_setup 26 "${keys[@]}" "$prompt" >/dev/null
redis-cli -p "$port" fcall kvrouter_floor_min_setup 3 "${min_keys[@]:0:3}" "$prompt" >/dev/null
redis-cli -p "$port" fcall kvrouter_floor_min_setup 3 "${big_keys[@]:0:3}" >/dev/null
redis-cli -p "$port" hset "$btag:cfg" bin "$(head -c 232 /dev/zero | tr '\0' 'b')" layout 6 >/dev/null
redis-cli -p "$port" hset "$btag:sc" rv 17962200000000001 egn 16384 lvs 1 >/dev/null
floor_drive 1 100 minbig
redis-cli -p "$port" save >/dev/null
redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
sleep 1
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$dir/cg.%p" \
  "$srv" --port "$port" --save '' --appendonly no --dir "$dir" --dbfilename dump.rdb >"$dir/valgrind.log" 2>&1 &
cg_up
nofill=--no-fill
pid=$(redis-cli -p "$port" info server | tr -d '\r' | awk -F: '$1 == "process_id" {print $2}')
echo "floor-instr: $($srv --version | awk '{print $3}'), callgrind files in $dir (redis pid $pid), load $(cut -d' ' -f1-3 /proc/loadavg)"
dumps() { { compgen -G "$dir/cg.$pid.*" || true; } | wc -l; }
rate=$(((n + 24) / 25))
for f in $floors; do
  floor_drive 5 40 "$f"   # warm-up: ~200 decisions
  callgrind_control -z "$pid" >/dev/null 2>&1
  a=$(fcalls)
  callgrind_control -i on "$pid" >/dev/null 2>&1
  floor_drive 25 "$rate" "$f"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  b=$(fcalls)
  before=$(dumps)
  callgrind_control -d "$pid" >/dev/null 2>&1
  for _ in $(seq 100); do (($(dumps) > before)) && break; sleep 0.2; done
  file=$(ls -t "$dir"/cg."$pid".* | head -1)
  total=$(callgrind_annotate "$file" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  dec=$(((b - a) / 2))
  ((dec > 0)) || { echo "floor-instr: $f made no decisions ($dir/drive.err)" >&2; exit 1; }
  echo "$f: $((total / dec)) instructions per decision over $dec decisions ($file)"
done
