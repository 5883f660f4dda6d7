#!/usr/bin/env bash
# eval-workloads.sh — the comparison table of docs/EVALUATION.md ("Generated workloads"): every
# generated workload × load level × seed, simulated with Dynamo's default cost (kv, kv-predict), the
# product's cost_model ttft (policies ttft, ttft-predict: the memory store decides and calibrates) and the
# cache-blind baselines in one run, and kv with the agentic preset in a second run;
# then one markdown table per workload, each number the mean over the seeds.
#
# Usage: scripts/eval-workloads.sh [OUTDIR]    OUTDIR keeps the JSON reports (default /tmp/kvrouter-eval)
# Env:   KVROUTER   the binary (default: go build ./cmd/kvrouter into OUTDIR)
#        WORKLOADS  default "shared-prefix multi-turn fanout mix"
#        RHOS       offered cache-blind prefill loads rho0, default "0.5 1 1.5 2"
#        SEEDS      default "1 2 3"
#        ARGS       extra simulate flags (default: none; 2000 requests, 8 workers, engine block 64)
# Exit:  0 when every run succeeded. Runs are deterministic: the same inputs print the same table.
set -euo pipefail

out="${1:-/tmp/kvrouter-eval}"
workloads="${WORKLOADS:-shared-prefix multi-turn fanout mix}"
rhos="${RHOS:-0.5 1 1.5 2}"
seeds="${SEEDS:-1 2 3}"
cd "$(dirname "$0")/.."
mkdir -p "$out"
bin="${KVROUTER:-}"
if [[ -z "$bin" ]]; then
  bin="$out/kvrouter"
  go build -o "$bin" ./cmd/kvrouter
fi

for w in $workloads; do
  for rho in $rhos; do
    for seed in $seeds; do
      base="$out/$w-rho$rho-seed$seed"
      # shellcheck disable=SC2086
      "$bin" simulate --workload "$w" --rho "$rho" --seed "$seed" --progress=false --json ${ARGS:-} \
        --policies kv,kv-predict,ttft,ttft-predict,least-loaded,round-robin,random >"$base-default.json"
      # shellcheck disable=SC2086
      "$bin" simulate --workload "$w" --rho "$rho" --seed "$seed" --progress=false --json ${ARGS:-} \
        --preset agentic --policies kv >"$base-agentic.json"
    done
  done
done

python3 - "$out" "$workloads" "$rhos" "$seeds" <<'EOF'
import json, sys
out, workloads, rhos, seeds = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
names = [("kv", "default", "dynamo (default knobs)"), ("kv", "agentic", "dynamo --agentic"),
         ("kv-predict", "default", "dynamo + predicted prefixes (kv-predict)"),
         ("ttft", "default", "ttft"), ("ttft-predict", "default", "ttft-predict"), ("least-loaded", "default", "least-loaded"),
         ("round-robin", "default", "round-robin"), ("random", "default", "random")]
mean = lambda xs: sum(xs) / len(xs)
for w in workloads:
    print(f"\n#### {w}\n")
    print("| ρ0 | ρ_work | policy | TTFT mean s | TTFT p99 s | block hit % | vs bound | ttft median pred. error |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|")
    for rho in rhos:
        reps = {(s, k): json.load(open(f"{out}/{w}-rho{rho}-seed{s}-{k}.json")) for s in seeds for k in ("default", "agentic")}
        work = mean([reps[(s, "default")]["rho_work"] for s in seeds])
        for pol, kind, label in names:
            ps = [next(p for p in reps[(s, kind)]["policies"] if p["policy"] == pol) for s in seeds]
            err = ""
            if pol.startswith("ttft"):
                errs = [p["ttft_model"]["median_rel_err"] for p in ps if p["ttft_model"]["predictions"] > 0]
                err = f"{100*mean(errs):.0f} %" if errs else "n/a (no worker warm before routing ended)"
            print(f"| {float(rho):.2f} | {work:.2f} | {label} | {mean([p['ttft_ms']['mean'] for p in ps])/1000:.3f} | "
                  f"{mean([p['ttft_ms']['p99'] for p in ps])/1000:.3f} | {100*mean([p['block_hit_rate'] for p in ps]):.1f} | "
                  f"{100*mean([p['block_hit_vs_bound'] for p in ps]):.0f} % | {err} |")
EOF
