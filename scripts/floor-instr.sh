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
# decisions, then ~DECISIONS (default 1,000) counted (instrumentation on), driven by `kvrouter bench floor` open
# loop (one client's pace: the generator sends each route, then its done; rate DECISIONS/25 per second under
# valgrind's slowness), decisions counted by Redis (commandstats FCALLs / 2). The idle server's own background
# work (serverCron at hz 10, ~1.1 M instructions per second under callgrind) is counted first for 25 s and
# subtracted for each run's duration: at 40 decisions/s it would add ~28 k per decision, at 12/s ~95 k.
# Printed per floor: instructions per decision without the background, and with it. KVROUTER picks the binary (default bin/kvrouter); REDIS_SERVER
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

. scripts/redis-floor/pools.sh   # the floors' keys, arguments, set-up and bench floor flags, as redis-floor.sh's
nofill=   # --no-fill once the RDB holds minbig's prompts (filled natively below, not under valgrind)
floor_drive() { # SECONDS RATE FLOOR: one client's pace, route then its done
  floor_flags "$3" || exit 2
  "$kvr" bench floor --store "redis://127.0.0.1:$port" --rates "$2" --duration "$1s" --repeat 1 --senders 1 --spin-tail 0 $nofill \
    "${FLOOR_FLAGS[@]}" >/dev/null 2>>"$dir/drive.err"
}
fcalls() { redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' '$1 == "cmdstat_fcall" {print $3}'; }

# Natively: the library, every floor's pool, minbig's prompts (one short run fills them), saved.
cg_native floor-instr "$port" "$dir"
redis-cli -p "$port" -x function load <"${FLOOR_LIB:-scripts/redis-floor/decision.lua}" >/dev/null
floor_setup "$port"
floor_setup_big "$port"
floor_drive 1 100 minbig
cg_restart "$dir"
pid=$cg_pid
nofill=--no-fill
echo "floor-instr: $($srv --version | awk '{print $3}'), callgrind files in $dir (redis pid $pid), load $(cut -d' ' -f1-3 /proc/loadavg)"
# counted SECONDS RATE FLOOR: one `bench floor` run with instrumentation on (cg_count); sets dec (decisions:
# FCALLs / 2) beside cg_instr, cg_ms and cg_file.
counted() {
  local a
  a=$(fcalls)
  cg_count "$dir" "$pid" floor_drive "$1" "$2" "$3"
  dec=$((($(fcalls) - a) / 2))
}
# The server's background instructions per second, idle: subtracted from each run for its duration, since a
# floor paced at DECISIONS/25 per second would otherwise carry ~1.1 M / rate of it per decision (28 k at 40/s).
# Counted over a window as long as the runs' (25 s), so the instrumentation switches' own delay, inside both
# measured windows alike, cancels.
bg=$(cg_idle "$dir" "$pid" 25)
echo "background (idle server): $bg instructions per second"
rate=$(((n + 24) / 25))
for f in $floors; do
  floor_drive 5 40 "$f"   # warm-up: ~200 decisions
  counted 25 "$rate" "$f"
  ((dec > 0)) || { echo "floor-instr: $f made no decisions ($dir/drive.err)" >&2; exit 1; }
  awk -v f="$f" -v i="$cg_instr" -v d="$dec" -v ms="$cg_ms" -v bg="$bg" -v file="$cg_file" 'BEGIN { s = ms / 1000
    printf "%s: %.0f instructions per decision over %d decisions (%.0f with the background of its %.1f s; %s)\n", f, (i - bg * s) / d, d, i / d, s, file }'
done
