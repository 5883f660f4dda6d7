#!/usr/bin/env bash
# roster-percall.sh — Redis instructions per call (the FCALL's own: scripts/callgrind_fcall.py) of roster
# changes at fleet scale under `kvrouter bench churn`: a removal, the decisions after it (which rebuild
# what the Lua VM memoized of the roster and carry the dead slots' reclamation), a registration and the
# decisions after it. Deterministic within ~1 %, so a build's per-call bound (issue 15: every call < 1 ms,
# ≈ 3.4 M instructions on a quiet box) can be judged on a noisy one.
#
#   scripts/roster-percall.sh PORT KVROUTER [bench churn flags…]
#   e.g. REDIS_SERVER=/root/rsrc/jem/src/redis-server scripts/roster-percall.sh 7412 bin/kvrouter --workers 4096
#
# Starts its own redis-server on PORT (never one it did not start), loads the route benchmark's index
# natively (prefix instr:; --workers, --blocks, --prompt, --sharing as given), saves it, restarts from that
# RDB under callgrind (dumps before every FCALL; the server's Lua VM starts cold, as after a restart or a
# failover), runs `bench churn --prefix instr:` with instrumentation on (its warm-up included:
# "route-first" is the cold VM's first call), and matches the dumps to the calls `--ops` listed.
# Prints mean and max per kind of call; keeps the dumps, ops.txt and joined.txt in the printed directory.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
port=${1:?usage: scripts/roster-percall.sh PORT KVROUTER [bench churn flags…]}
kvr=${2:?KVROUTER}
shift 2
command -v valgrind >/dev/null || { echo "roster-percall: needs valgrind" >&2; exit 2; }
. scripts/callgrind-redis.sh
cg_refuse_busy roster-percall "$port"
dir=$(mktemp -d /tmp/roster-percall.XXXXXX)
# The index flags bench route understands (the churn-only ones are not passed to it).
idx=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --workers|--blocks|--prompt|--sharing) idx+=("${args[i]}" "${args[i + 1]}"); i=$((i + 1)) ;;
    --workers=*|--blocks=*|--prompt=*|--sharing=*) idx+=("${args[i]}") ;;
  esac
done
cg_start roster-percall "$port" "$dir" "$kvr" --dump-before=fcallCommand -- "${idx[@]}"
callgrind_control -i on "$cg_pid" >/dev/null 2>&1
"$kvr" bench churn --store "redis://127.0.0.1:$port" --prefix instr: --ops "$dir/ops.txt" "$@" >"$dir/churn.json" 2>"$dir/churn.txt"
callgrind_control -i off "$cg_pid" >/dev/null 2>&1
callgrind_control -d "$cg_pid" >/dev/null 2>&1 || true
sleep 1
mapfile -t files < <(ls "$dir"/cg.* | sort -V)
python3 scripts/callgrind_fcall.py "${files[@]}" >"$dir/calls.txt"
# The dumps of FCALLs, in order; the last len(ops) are the measured calls.
awk '$3 > 0 {print $3}' "$dir/calls.txt" | tail -n "$(wc -l <"$dir/ops.txt")" >"$dir/fcall.txt"
paste "$dir/ops.txt" "$dir/fcall.txt" >"$dir/joined.txt"
echo "roster-percall: dumps and joined.txt in $dir"
printf '%-24s %6s %12s %12s\n' call calls mean max
awk '{s[$1] += $2; n[$1]++; if ($2 > m[$1]) m[$1] = $2} END {for (k in s) printf "%-24s %6d %12.0f %12d\n", k, n[k], s[k] / n[k], m[k]}' \
  "$dir/joined.txt" | sort
