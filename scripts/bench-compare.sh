#!/usr/bin/env bash
# bench-compare.sh: the same `kvrouter bench` run against two revisions, alternated in one session, so a
# before/after is "the same benchmark in the same run" (the shared box's load hits both alike).
#
#   scripts/bench-compare.sh [-n ROUNDS] [-g] [-p PORT] OLD_REV NEW_REV -- <bench subcommand and flags>
#   scripts/bench-compare.sh main bench -- route --store redis://127.0.0.1:7100 --workers 64 --clients 1,16 --rate half --repeat 1
#   scripts/bench-compare.sh -g -p 7331 a1d765f HEAD -- route --workers 16,64 --clients 1,16 --rate half --repeat 1
#   scripts/bench-compare.sh -p 7331 bin/kvrouter /tmp/try/kvrouter -- route --workers 16 --clients 1,16 --repeat 1
#
# Each revision's kvrouter is built from a detached `git worktree` in a temp dir (removed afterwards; a side
# given as the path of an executable is that kvrouter binary, used as it is);
# then the bench runs old, new, old, new, … (ROUNDS pairs, default 3), each invocation's JSON is kept in
# the temp dir (printed path; BENCH_COMPARE_KEEP=1 keeps it), and the medians [min–max] of every figure
# over all runs of all rounds are printed side by side with new/old.
#
# -g (graft): build OLD with NEW's benchmark instead of its own — NEW's internal/bench/*.go (tests
# excluded), cmd/kvrouter/cmd_bench_{route,ingest,register}.go and statestore/redis_stats.go are copied
# over OLD's tree before building, so both sides run the same driver and only the store code differs.
# It works while the drivers need nothing else from NEW (they use only statestore's public Store API
# and the stats readers); if OLD then fails to build, the script stops and says so.
#
# -p PORT (pinned, fresh): every run gets a redis-server of its own on PORT, started for it and shut down
# after it (scripts/own-redis.sh: the last CPU at SCHED_FIFO 10), and the bench runs pinned to the other
# CPUs at SCHED_FIFO 5 (own_client_pin), as scripts/route-pinned.sh runs it; `--store redis://127.0.0.1:PORT`
# (with OWN_UNIX=1 the server's Unix socket, unix://…)
# is appended to the bench flags (give none). Each side then starts from an empty server — no state of the
# other revision's layout, no memos warmed by it — and the client does not share Redis's CPU (docs/
# PERFORMANCE.md "Nineteenth session"). Without -p the runs go to whatever --store names, unpinned.
#
# Caveat without -g: each revision runs its OWN `kvrouter bench`, so both must understand the flags given. A
# revision from before the benchmark methodology of docs/PERFORMANCE.md ("How Redis figures are taken")
# has no Redis CPU figures, no done, no sharing, no open loop, and resets commandstats (CONFIG RESETSTAT)
# on the server: compare such a revision only on a Redis you started yourself, and only on the figures
# both print (decisions/s, p50, p99; its redis_us_per_decision is commandstats usec of EVALSHA).
set -euo pipefail

rounds=3 graft=0 port=
while [[ "${1:-}" == -n || "${1:-}" == -g || "${1:-}" == -p ]]; do
	case $1 in
	-n) rounds=$2; shift 2 ;;
	-g) graft=1; shift ;;
	-p) port=$2; shift 2 ;;
	esac
done
if [[ $# -lt 3 || "$3" != "--" ]]; then
	sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//' >&2
	exit 2
fi
old=$1 new=$2
shift 3
repo=$(git rev-parse --show-toplevel)
if [[ -n $port ]] && redis-cli -p "$port" ping >/dev/null 2>&1; then
	echo "bench-compare: something already listens on $port; -p needs a free port (it only uses servers it starts)" >&2
	exit 2
fi
tmp=$(mktemp -d /tmp/bench-compare.XXXXXX)
cleanup() {
	for side in old new; do
		[[ -d "$tmp/$side" ]] && git -C "$repo" worktree remove --force "$tmp/$side" >/dev/null 2>&1 || true
	done
	if [[ "${BENCH_COMPARE_KEEP:-}" == 1 ]]; then
		echo "bench-compare: runs kept in $tmp" >&2
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

# A side given as an executable file (a kvrouter built elsewhere, e.g. from a working tree with a change
# not committed yet) is used as it is; a revision is built from a detached worktree.
for side in old new; do
	rev=$old
	[[ $side == new ]] && rev=$new
	if [[ -f $rev && -x $rev ]]; then
		[[ $graft == 1 ]] && { echo "bench-compare: -g needs two revisions, not binaries" >&2; exit 2; }
		cp "$rev" "$tmp/kvrouter-$side"
		echo "bench-compare: $side = $rev (a binary)" >&2
		continue
	fi
	git -C "$repo" worktree add --detach --quiet "$tmp/$side" "$rev"
	echo "bench-compare: $side = $rev ($(git -C "$tmp/$side" rev-parse --short HEAD))" >&2
done
if [[ $graft == 1 ]]; then
	echo "bench-compare: grafting new's benchmark onto old" >&2
	for f in "$tmp"/old/internal/bench/*.go; do
		[[ $f == *_test.go ]] || rm "$f"
	done
	for f in "$tmp"/new/internal/bench/*.go; do
		[[ $f == *_test.go ]] || cp "$f" "$tmp/old/internal/bench/"
	done
	for f in cmd/kvrouter/cmd_bench_route.go cmd/kvrouter/cmd_bench_ingest.go cmd/kvrouter/cmd_bench_register.go statestore/redis_stats.go; do
		cp "$tmp/new/$f" "$tmp/old/$f"
	done
fi
for side in old new; do
	[[ -d "$tmp/$side" ]] || continue
	echo "bench-compare: building $side ($(git -C "$tmp/$side" rev-parse --short HEAD))" >&2
	(cd "$tmp/$side" && go build -o "$tmp/kvrouter-$side" ./cmd/kvrouter) || {
		echo "bench-compare: $side does not build$([[ $graft == 1 ]] && echo " (with -g: new's benchmark needs something old lacks)")" >&2
		exit 1
	}
	git -C "$repo" worktree remove --force "$tmp/$side"
done

# run_bench KVROUTER ARGS…: one bench invocation; with -p in a subshell of its own whose EXIT trap
# (own-redis.sh) shuts its fresh server down.
run_bench() {
	local kvr=$1
	shift
	if [[ -z $port ]]; then
		"$kvr" bench "$@"
		return
	fi
	(
		. "$repo/scripts/own-redis.sh"
		own_redis_start bench-compare "$port" >&2
		own_client_pin
		echo "bench-compare: load before $(cut -d' ' -f1-3 /proc/loadavg); server pinned, client ${CPIN[*]:-unpinned}" >&2
		rc=0
		"${CPIN[@]}" "$kvr" bench "$@" --store "$own_url" || rc=$?
		echo "bench-compare: load after $(cut -d' ' -f1-3 /proc/loadavg)" >&2
		exit "$rc"
	)
}

for ((i = 1; i <= rounds; i++)); do
	for side in old new; do
		echo "bench-compare: round $i/$rounds, $side: kvrouter bench $*" >&2
		run_bench "$tmp/kvrouter-$side" "$@" >"$tmp/$side-$i.json" 2>"$tmp/$side-$i.log" || {
			echo "bench-compare: $side run $i failed:" >&2
			tail -20 "$tmp/$side-$i.log" >&2
			exit 1
		}
	done
done

python3 - "$tmp" "$rounds" "$old" "$new" <<'PY'
import json, statistics, sys
tmp, rounds, oldrev, newrev = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
metrics = ["decisions_per_s", "p50_us", "p99_us", "max_us", "redis_cpu_us_per_decision",
           "redis_cpu_us_per_decision_excl_done", "decisions_per_redis_core_s", "command_us_per_decision",
           "redis_us_per_decision", "blocks_per_s", "redis_cpu_us_per_block", "blocks_per_redis_core_s",
           "bytes_per_entry", "wall_last_over_first", "redis_cpu_last_over_first",
           "wall_us_per_registration", "redis_cpu_us_per_registration"]
vals = {}  # (key, metric) -> side -> [values]
order = []
def add(side, key, rec):
    for m in metrics:
        v = rec.get(m)
        if isinstance(v, (int, float)) and v != 0:
            k = (key, m)
            if k not in vals:
                vals[k] = {"old": [], "new": []}
                order.append(k)
            vals[k][side].append(float(v))
for side in ("old", "new"):
    for i in range(1, rounds + 1):
        rep = json.load(open(f"{tmp}/{side}-{i}.json"))
        runs = rep.get("runs")
        if not isinstance(runs, list) or not runs or "blocks_applied" in runs[0] or "slices" in runs[0]:
            runs = [rep] + (runs if isinstance(runs, list) else [])  # ingest/register: top level + runs
        for r in runs:
            if rep.get("bench") == "route" and "clients" in r:
                r.setdefault("mode", "closed")  # revisions before open-loop runs were all closed loop
            key = " ".join(f"{f}={r.get(f, rep.get(f))}" for f in ("store", "workers", "prompt_blocks", "clients", "mode")
                           if r.get(f, rep.get(f)) is not None)
            add(side, key or rep.get("bench", "run"), r)
            for sl in r.get("slices") or []:  # register: one row per slice of workers
                if "from" in sl and "wall_us_per_registration" in sl and not isinstance(sl["wall_us_per_registration"], dict):
                    add(side, f"{key} registering {sl['from']}-{sl['to']}", sl)
def fmt(xs):
    if not xs:
        return "-"
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}–{max(xs):.1f}] n={len(xs)}"
print(f"old = {oldrev}, new = {newrev}; median [min–max] over every run of {rounds} alternated rounds")
rows = [("run", "figure", "old", "new", "new/old")]
for (key, m) in order:
    o, n = vals[(key, m)]["old"], vals[(key, m)]["new"]
    ratio = f"{statistics.median(n) / statistics.median(o):.2f}" if o and n else "-"
    rows.append((key, m, fmt(o), fmt(n), ratio))
w = [max(len(r[c]) for r in rows) for c in range(5)]
for r in rows:
    print("  ".join(r[c].ljust(w[c]) for c in range(5)).rstrip())
PY
