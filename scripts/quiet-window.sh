#!/usr/bin/env bash
# quiet-window.sh — wait for a quiet window on the shared box and take the latency and tail figures in it.
# The VM's speed and stalls swing between hours (docs/PERFORMANCE.md, tenth to thirteenth sessions) and
# SPEC §9's p50/p99 and issue 15's "every call < 1 ms" (SLOWLOG) can only be judged in a quiet one, which
# no one watches for by hand. Start it at the beginning of a session, in the background:
#
#   scripts/quiet-window.sh OUTDIR [HOURS]        # e.g. nohup scripts/quiet-window.sh /tmp/quiet 3 &
#
# Every INTERVAL seconds (default 240) it runs scripts/box-gauge.sh (10 s); when the gauge says quiet, at
# once: scripts/route-pinned.sh (64 workers, 1 and 16 clients, open loop at half of saturation, 3 runs of
# 4 s), scripts/redis-floor.sh with OPENLOOP=half for the bare and the minimal deciding decision (minbig) in
# the same window, scripts/bench-tail.sh (4,096 workers, 1 M entries, 3 runs of 10 s), scripts/churn-tail.sh (4,096
# workers: a cold VM's first route, removals, registrations, SLOWLOG at 1 ms), then the gauge again — a
# window that closed during them voids them — and it sleeps AFTER seconds (default 600) before gauging
# again. It stops after HOURS (default 3) or when OUTDIR/stop exists. Everything goes to OUTDIR: log (one
# line per gauge, with its JSON verdict), pinned-<time>.{txt,json}, floor-<time>.txt, tail-<time>.{txt,json},
# churn-<time>.{txt,json}. Ports: the gauge 7301, the tail 7320, route-pinned 7331, churn-tail 7341, redis-floor 7345 (each
# script starts and stops its own server there and refuses a port in use). CPU-heavy work of one's own
# during a window perturbs it: check OUTDIR/log.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:?usage: scripts/quiet-window.sh OUTDIR [HOURS]}
hours=${2:-3}
mkdir -p "$out"
go build -o bin/kvrouter ./cmd/kvrouter || exit 2
end=$(($(date +%s) + ${hours%.*} * 3600))
while [[ ! -e $out/stop && $(date +%s) -lt $end ]]; do
  ts=$(date -u +%H%M%S)
  g=$(scripts/box-gauge.sh 7301 10 2>/dev/null)
  quiet=$?
  echo "$ts gauge $g" >>"$out/log"
  if [[ $quiet -ne 0 ]]; then
    sleep "${INTERVAL:-240}"
    continue
  fi
  scripts/route-pinned.sh 7331 --workers 64 --blocks 1000000 --clients 1,16 --rate half --repeat 3 \
    --duration 4s >"$out/pinned-$ts.json" 2>"$out/pinned-$ts.txt"
  echo "$(date -u +%H%M%S) route-pinned done ($ts)" >>"$out/log"
  OPENLOOP=half OPENLOOP_FLOORS="bare minbig" scripts/redis-floor.sh 7345 20000 >"$out/floor-$ts.txt" 2>&1
  echo "$(date -u +%H%M%S) redis-floor done ($ts)" >>"$out/log"
  OUT=$out/tail-$ts.json scripts/bench-tail.sh 7320 --workers 4096 --blocks 1000000 --clients 1 --repeat 3 \
    --duration 10s >"$out/tail-$ts.txt" 2>&1
  echo "$(date -u +%H%M%S) tail done ($ts)" >>"$out/log"
  scripts/churn-tail.sh 7341 --workers 4096 --blocks 1000000 >"$out/churn-$ts.json" 2>"$out/churn-$ts.txt"
  echo "$(date -u +%H%M%S) churn-tail done ($ts)" >>"$out/log"
  echo "$(date -u +%H%M%S) gauge-after $(scripts/box-gauge.sh 7301 10 2>/dev/null)" >>"$out/log"
  sleep "${AFTER:-600}"
done
