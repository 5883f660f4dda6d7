#!/usr/bin/env python3
"""stallprobe: how long this CPU was taken from a real-time task, as timestamped stalls.

A call's SLOWLOG time is wall-clock time: it also counts every moment the Redis thread did not run.
On a VM that includes the host descheduling the virtual CPU (or throttling the whole VM), which no
priority inside the guest prevents and which the guest does not report as steal time here. This probe
sleeps `--period-us` in a loop and records every wake-up that came more than `--threshold-us` late,
with when it started (Unix µs, the benchmark's client clock): run it pinned to Redis's CPU at a
real-time priority above Redis's (scripts/bench-tail.sh does), so a late wake-up means the CPU itself
was unavailable, not that Redis was busy. Its own cost is a wake-up per period (~1-3 % of the CPU at
the default 250 µs).

It stops after --duration seconds, or at SIGTERM/SIGINT, and then prints its report.

Output (stdout, JSON): {"period_us", "threshold_us", "seconds", "wakeups", "stalls": [{"start_unix_us",
"us"}], "stall_count", "max_us", "stalled_us"}; "us" is the time beyond the period.
"""
import argparse
import json
import signal
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=86400, help="seconds to run at most (default a day)")
    ap.add_argument("--period-us", type=int, default=250, help="sleep per wake-up, µs (default 250)")
    ap.add_argument("--threshold-us", type=int, default=200,
                    help="lateness from which a wake-up is a stall, µs (default 200)")
    ap.add_argument("--max-stalls", type=int, default=10000, help="stalls listed at most (default 10000)")
    a = ap.parse_args()

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    period = a.period_us / 1e6
    mono, real = time.monotonic_ns, time.time_ns
    stalls, wakeups, count, worst, total = [], 0, 0, 0, 0
    start = mono()
    end = start + int(a.duration * 1e9)
    prev, prev_real = start, real()
    while prev < end and not stop:
        time.sleep(period)
        now = mono()
        late_us = (now - prev) / 1e3 - a.period_us
        wakeups += 1
        if late_us > a.threshold_us:
            count += 1
            worst = max(worst, late_us)
            total += late_us
            if len(stalls) < a.max_stalls:
                stalls.append({"start_unix_us": prev_real // 1000, "us": round(late_us, 1)})
        prev, prev_real = now, real()
    json.dump({"period_us": a.period_us, "threshold_us": a.threshold_us, "seconds": (prev - start) / 1e9,
               "wakeups": wakeups, "stall_count": count, "max_us": round(worst, 1),
               "stalled_us": round(total, 1), "stalls": stalls}, fp=sys.stdout)
    print()


if __name__ == "__main__":
    main()
