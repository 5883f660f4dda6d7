#!/usr/bin/env bash
# p50-floor.sh — SPEC §9's open-loop latency (p50/p99 at half of saturation) beside its floor AT THE SAME
# RATE: kvrouter's route (64 workers, 1 and 16 clients unless WORKERS/CLIENTS say;
# scripts/route-pinned.sh, closed loop then open loop at half of what the closed loop made), then the least
# decision that chooses (redis-floor.sh's minbig: holders and their prefix, loads, cost, pick, booking,
# release, over the same index shape) driven open loop at each rate kvrouter's open loop reached, with the
# same client count. A floor taken at its own half-saturation runs at a different rate and utilisation; this
# one says how much of kvrouter's p50 any decision made inside Redis would pay at kvrouter's load on this
# machine at this minute.
#
#   scripts/p50-floor.sh OUTDIR [ROUNDS]        # e.g. scripts/p50-floor.sh /tmp/p50 3
#
# WORKERS (default 64) and CLIENTS (default 1,16) pick kvrouter's cells; RELEASE_DELAY (default 0: each done
# its own call) is `bench route --release-delay` — 5ms carries dones as `serve` does by default. The floor
# keeps its 64 candidates whatever WORKERS is (it is the least deciding decision over the SPEC's pool), and
# always issues its done as a call of its own. CLIENT_PIN as in own-redis.sh (rt for a p99 reading).
#
# Per round: scripts/box-gauge.sh 7301 10 (OUTDIR/gauge-R.txt), route-pinned.sh on port 7331
# (OUTDIR/pinned-R.{json,txt}), redis-floor.sh on port 7345 per cell (OUTDIR/floor-R-wW-cN.txt); one
# summary line per round and cell on stdout: kvrouter's p50/p99 and Redis CPU per decision, the
# floor's p50s, p99s and Redis CPU per decision of its three runs. Every server is the scripts' own (started on
# those ports, which must be free, and shut down after). Needs root for the pinning, as the scripts it runs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: scripts/p50-floor.sh OUTDIR [ROUNDS]}
rounds=${2:-1}
mkdir -p "$out"
go build -o bin/kvrouter ./cmd/kvrouter
for r in $(seq "$rounds"); do
  scripts/box-gauge.sh 7301 10 >"$out/gauge-$r.txt" 2>&1 || true   # a gauge: "not quiet" is information
  scripts/route-pinned.sh 7331 --workers "${WORKERS:-64}" --blocks 1000000 --clients "${CLIENTS:-1,16}" --rate half \
    --repeat 3 --duration 4s --release-delay "${RELEASE_DELAY:-0}" \
    >"$out/pinned-$r.json" 2>"$out/pinned-$r.txt"
  # workers:clients:rate:p50:p99[min-max]:cpu of each open-loop summary
  rows=$(python3 - "$out/pinned-$r.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
for s in d["summaries"]:
    if s.get("mode", "").startswith("open"):
        print("%d:%d:%d:%.0f:%.0f[%.0f-%.0f]:%.1f" % (s["workers"], s["clients"], round(s["decisions_per_s"]["median"]), s["p50_us"]["median"],
              s["p99_us"]["median"], s["p99_us"]["min"], s["p99_us"]["max"], s["redis_cpu_us_per_decision"]["median"]))
EOF
)
  for row in $rows; do
    IFS=: read -r w c rate p50 p99 cpu <<<"$row"
    OPENLOOP=$rate OPENLOOP_FLOORS=minbig OPENLOOP_FLAGS="--clients $c" scripts/redis-floor.sh 7345 20000 \
      >"$out/floor-$r-w$w-c$c.txt" 2>&1
    fp50=$(awk '/^floor +[0-9]+\/s run/ { printf "%s%s", sep, $6; sep="," }' "$out/floor-$r-w$w-c$c.txt")
    fp99=$(awk '/^floor +[0-9]+\/s run/ { printf "%s%s", sep, $9; sep="," }' "$out/floor-$r-w$w-c$c.txt")
    fcpu=$(awk '/^floor +[0-9]+\/s run/ { for (i = 2; i < NF; i++) if ($i == "CPU" && $(i - 1) == "Redis") { printf "%s%s", sep, $(i + 1); sep="," } }' "$out/floor-$r-w$w-c$c.txt")
    echo "round $r workers $w clients $c at $rate/s: kvrouter p50 $p50 µs p99 $p99 µs Redis CPU $cpu µs/decision; floor (minbig) p50 $fp50 µs p99 $fp99 µs, Redis CPU $fcpu µs/decision; $(grep -o '"ping_redis_cpu_us": [0-9.]*, "stalls_over_200us": [0-9]*, "stalls_over_1ms": [0-9]*' "$out/gauge-$r.txt" || true)"
  done
done
