#!/usr/bin/env python3
"""tail_bursts: the shape of an open-loop tail in time, and what each slow call coincided with.

  python3 scripts/tail_bursts.py CALLS.tsv [--server-probe PROBE.json] [--client-probe PROBE.json]
                                 [--threshold-us 1000] [--gap-us 3000] [--show 10]

CALLS.tsv is `kvrouter bench route --calls-out` (one row per open-loop call: run, slot, sched_unix_us,
lag_us, service_us, latency_us). The probes are scripts/stallprobe/stallprobe.c's JSON: on Redis's CPU above
Redis's priority (bench-tail.sh's own probe) and on the client's CPU at the client's own scheduling class
(bench-tail.sh with CLIENT_PROBE=1): a stall there is time the client's threads could not have run either.

Per run: its calls, p50/p99, the calls at or over the threshold and the bursts they form (slow calls less
than --gap-us apart, by scheduled time: a stall delays the calls in it and the backlog after it), then the
slow calls by their burst's class, the first that applies:
  server stall  — stalls of Redis's CPU overlap the burst (from its first call's schedule to its last
                  reply) at least as long as stalls of the client's CPU do;
  client stall  — stalls of the client's CPU overlap it, longer;
  sent late     — no stall seen, and its worst call's send lag is at least half its latency (the
                  generator or the client's CPU kept the calls);
  queued        — none of these: the calls waited behind others, or Redis ran slowly, with no stall seen.
The largest bursts are listed with their worst latency, worst lag and the stalls in them. A probe that did
not run (or missed a stall under its threshold) leaves its class short: the classes say what the probes saw.
"""
import argparse
import json


def load_calls(path):
    runs = {}
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        if header[:6] != ["run", "slot", "sched_unix_us", "lag_us", "service_us", "latency_us"]:
            raise SystemExit(f"{path}: not a --calls-out file (header {header})")
        for line in f:
            run, slot, sched, lag, _svc, lat = line.rstrip("\n").split("\t")
            runs.setdefault(int(run), []).append((int(sched), float(lag), float(lat)))
    for calls in runs.values():
        calls.sort()
    return runs


def load_stalls(path):
    if not path:
        return []
    p = json.load(open(path))
    return sorted((s["start_unix_us"], s["start_unix_us"] + s["us"], s["us"]) for s in p["stalls"])


def overlapping(stalls, a, b):
    return [s for s in stalls if s[0] < b and s[1] > a]


def stalled(stalls, a, b):
    """µs of stalls inside [a, b]."""
    return sum(max(0, min(b, e) - max(x, a)) for x, e, _ in stalls)


def quantile(sorted_vals, q):
    return sorted_vals[min(len(sorted_vals) - 1, int(q * len(sorted_vals)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("calls")
    ap.add_argument("--server-probe")
    ap.add_argument("--client-probe")
    ap.add_argument("--threshold-us", type=float, default=1000)
    ap.add_argument("--gap-us", type=float, default=3000)
    ap.add_argument("--show", type=int, default=10)
    a = ap.parse_args()
    server, client = load_stalls(a.server_probe), load_stalls(a.client_probe)
    for run, calls in sorted(load_calls(a.calls).items()):
        lats = sorted(c[2] for c in calls)
        t0, t1 = calls[0][0], calls[-1][0]
        slow = [c for c in calls if c[2] >= a.threshold_us]
        bursts = []
        for c in slow:
            if bursts and c[0] - bursts[-1][-1][0] < a.gap_us:
                bursts[-1].append(c)
            else:
                bursts.append([c])
        classes = {"server stall": 0, "client stall": 0, "sent late": 0, "queued": 0}
        for b in bursts:
            s, e = b[0][0], max(c[0] + c[2] for c in b)
            ss, cs = stalled(server, s, e), stalled(client, s, e)
            worst = max(b, key=lambda c: c[2])
            if ss > 0 and ss >= cs:
                classes["server stall"] += len(b)
            elif cs > 0:
                classes["client stall"] += len(b)
            elif worst[1] >= worst[2] / 2:
                classes["sent late"] += len(b)
            else:
                classes["queued"] += len(b)
        secs = max((t1 - t0) / 1e6, 1e-9)
        sizes = sorted(len(b) for b in bursts)
        print(f"run {run}: {len(calls)} calls in {secs:.1f} s, p50 {quantile(lats, 0.5):.0f} µs, p99 {quantile(lats, 0.99):.0f} µs; "
              f"{len(slow)} at or over {a.threshold_us:.0f} µs ({100 * len(slow) / len(calls):.2f} %) in {len(bursts)} bursts "
              f"({len(bursts) / secs:.1f} per s, median {quantile(sizes, 0.5) if sizes else 0} calls, largest {sizes[-1] if sizes else 0}); "
              f"server-CPU stalls seen {len(overlapping(server, t0, t1))}, client-CPU stalls seen {len(overlapping(client, t0, t1))}")
        print("  slow calls by class: " + ", ".join(f"{k} {v}" for k, v in classes.items()))
        for b in sorted(bursts, key=len, reverse=True)[:a.show]:
            s, e = b[0][0], max(c[0] + c[2] for c in b)
            ss, cs = overlapping(server, s, e), overlapping(client, s, e)
            print(f"  burst at +{(s - t0) / 1e6:.3f} s: {len(b)} calls over {(e - s) / 1e3:.1f} ms, worst latency "
                  f"{max(c[2] for c in b):.0f} µs, worst lag {max(c[1] for c in b):.0f} µs; server-CPU stalls "
                  f"{[round(x[2]) for x in ss]} µs, client-CPU stalls {[round(x[2]) for x in cs]} µs")


if __name__ == "__main__":
    main()
