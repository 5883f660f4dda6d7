#!/usr/bin/env python3
"""tail_attribution: which of a benchmark's slow Redis calls a stall of Redis's CPU explains.

  python3 scripts/tail_attribution.py BENCH_ROUTE.json STALLPROBE.json

For each SLOWLOG entry of the pool's calls in a `kvrouter bench route` report (runs[].slowlog.entries:
Redis's own execution time, second resolution), it finds the client's view of the same call
(runs[].slow_client_calls: same operation, started in that second or the one before, at least as long,
the closest such duration) and sums the stalls scripts/stallprobe/stallprobe.c saw on Redis's CPU inside that
window. The entry is "stalled" when its time minus the stalls is under 1 ms: without the time the CPU
was taken from every task on it, the call would have met SPEC §8's bound. Otherwise it is "slowed" when
the probe's fixed spin ran slowly (slow_spins of the C probe) at least twice inside the window: the CPU
was there but ran at a fraction of its speed. Otherwise it is "NOT explained". The client window is
wider than Redis's execution, so this can credit a stall that fell outside it; an entry with no stall
at all inside its window is certainly not explained. Prints one line per entry and a total.
"""
import json
import sys


def main():
    rep, probe = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
    period = probe["period_us"]
    stalls = [(s["start_unix_us"], s["start_unix_us"] + period + s["us"]) for s in probe["stalls"]]
    spins = sorted(x["at_unix_us"] for x in probe.get("slow_spins") or [])

    def stalled(a, b):  # µs of probe stalls inside [a, b]
        return sum(max(0, min(b, e) - max(x, a)) for x, e in stalls)

    print(f"stall probe on Redis's CPU: {probe['stall_count']} stalls over {probe['threshold_us']} µs in "
          f"{probe['seconds']:.0f} s (max {probe['max_us']:.0f} µs, {probe['stalled_us'] / 1e3:.1f} ms in all); "
          f"{len(spins)} slow spins")
    tot = unexplained = 0
    for r in rep["runs"]:
        sl = r.get("slowlog") or {}
        entries = sl.get("entries") or []
        calls = r.get("slow_client_calls") or []
        used, lines, expl = set(), [], 0
        for e in entries:
            cmd = e["command"]
            op = "done" if cmd.endswith("_lease") else "route" if cmd.endswith("_route") else None
            cand = [(c["us"] - e["us"], k) for k, c in enumerate(calls) if k not in used and c["op"] == op
                    and c["us"] >= e["us"] and e["unix_s"] - 1 <= c["start_unix_us"] // 1000000 <= e["unix_s"]]
            if not cand:
                lines.append(f"    {e['us']} µs {cmd} at {e['unix_s']}: no client call matches")
                continue
            k = min(cand)[1]
            used.add(k)
            c = calls[k]
            a, b = c["start_unix_us"], c["start_unix_us"] + c["us"]
            st = stalled(a, b)
            slow = sum(1 for t in spins if a <= t <= b)
            verdict = "stalled" if e["us"] - st < 1000 else "slowed" if slow >= 2 else "NOT explained"
            expl += verdict != "NOT explained"
            lines.append(f"    {e['us']} µs {cmd} at {e['unix_s']}: client saw {c['us']:.0f} µs, Redis's CPU "
                         f"stalled {st:.0f} µs of it, {slow} slow spins: {verdict}")
        tot += len(entries)
        unexplained += len(entries) - expl
        print(f"run {r.get('repeat', '?')}: {r['workers']} workers, {r['decisions']} decisions, p50 {r['p50_us']:.0f} µs, "
              f"p99 {r['p99_us']:.0f} µs; SLOWLOG ≥ 1 ms: {sl.get('logged', 0)} of the pool's calls (max "
              f"{sl.get('max_us', 0)} µs; {sl.get('logged_all', 0)} entries in all), {expl} stalled or slowed")
        if lines:
            print("\n".join(lines))
    print(f"total: {tot} of the pool's calls ≥ 1 ms, {unexplained} neither stalled nor slowed")


if __name__ == "__main__":
    main()
