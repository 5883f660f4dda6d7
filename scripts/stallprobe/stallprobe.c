// stallprobe.c — how long this CPU was taken from a real-time task, as timestamped stalls.
//
// A call's SLOWLOG time is wall-clock time: it also counts every moment the Redis thread did not run. On a
// VM that includes the host descheduling the virtual CPU, which no priority inside the guest prevents and
// which the guest does not report as steal time here. The probe sleeps --period-us in a loop and records
// every wake-up that came more than --threshold-us late, with when it started (Unix µs, the benchmark's
// client clock). Run pinned to Redis's CPU at a real-time priority above Redis's (scripts/bench-tail.sh
// does), a late wake-up means the CPU itself was unavailable, not that Redis was busy. In C a wake-up
// costs a few µs, so it can wake every 250 µs without slowing the calls it watches (a Python version at
// that period took ~10 % of the CPU and caused slow calls of its own).
//
//   stallprobe [--duration S] [--period-us P] [--threshold-us T] [--max-stalls N]
//
// After each wake-up it also times a fixed spin of integer arithmetic (--spin N iterations, ~2 µs; 0 = off)
// and lists the wake-ups whose spin took over --slow-factor (default 4) times the fastest spin seen: the
// CPU was there but ran slowly (the host sharing the core), which a late wake-up cannot show.
//
// Stops after S seconds or at SIGTERM/SIGINT, then prints
// {"period_us","threshold_us","seconds","wakeups","stall_count","max_us","stalled_us","stalls":[{"start_unix_us","us"}],
//  "spin","spin_min_ns","slow_spins":[{"at_unix_us","ns"}]}.
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static long long ns(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
  double duration = 86400, threshold_us = 200;
  long period_us = 250, max_stalls = 10000, spin = 2000;
  double slow_factor = 4;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--duration")) duration = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--period-us")) period_us = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--threshold-us")) threshold_us = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--max-stalls")) max_stalls = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--spin")) spin = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--slow-factor")) slow_factor = atof(argv[i + 1]);
    else { fprintf(stderr, "stallprobe: unknown option %s\n", argv[i]); return 2; }
  }
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal; // no SA_RESTART: a signal ends the current sleep
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  long long *st = malloc(sizeof(long long) * 2 * (size_t)max_stalls);
  if (!st) return 1;
  long long *sl = malloc(sizeof(long long) * 2 * (size_t)max_stalls);
  if (!sl) return 1;
  long n = 0, count = 0, wakeups = 0, nslow = 0;
  long long spin_min = -1;
  volatile unsigned long sink = 0;
  double worst = 0, total = 0;
  long long start = ns(CLOCK_MONOTONIC), end = start + (long long)(duration * 1e9);
  long long prev = start, prev_real = ns(CLOCK_REALTIME);
  struct timespec p = {period_us / 1000000, (period_us % 1000000) * 1000};
  while (!stop && prev < end) {
    nanosleep(&p, NULL);
    long long now = ns(CLOCK_MONOTONIC);
    double late = (now - prev) / 1e3 - (double)period_us;
    wakeups++;
    if (late > threshold_us) {
      count++;
      total += late;
      if (late > worst) worst = late;
      if (n < max_stalls) { st[2 * n] = prev_real / 1000; st[2 * n + 1] = (long long)(late * 10); n++; }
    }
    if (spin > 0) {
      // A fixed amount of work: its time is the CPU's speed for this task right now.
      long long a = ns(CLOCK_MONOTONIC);
      unsigned long x = (unsigned long)now;
      for (long k = 0; k < spin; k++) x = x * 6364136223846793005UL + 1442695040888963407UL;
      sink += x;
      long long d = ns(CLOCK_MONOTONIC) - a;
      if (spin_min < 0 || d < spin_min) spin_min = d;
      if (wakeups > 100 && d > slow_factor * spin_min && nslow < max_stalls) {
        sl[2 * nslow] = ns(CLOCK_REALTIME) / 1000 - d / 1000;
        sl[2 * nslow + 1] = d;
        nslow++;
      }
    }
    prev = ns(CLOCK_MONOTONIC); // the spin is not sleep: lateness counts from here
    prev_real = ns(CLOCK_REALTIME);
  }
  printf("{\"period_us\": %ld, \"threshold_us\": %.0f, \"seconds\": %.6f, \"wakeups\": %ld, \"stall_count\": %ld, "
         "\"max_us\": %.1f, \"stalled_us\": %.1f, \"stalls\": [",
         period_us, threshold_us, (prev - start) / 1e9, wakeups, count, worst, total);
  for (long i = 0; i < n; i++)
    printf("%s{\"start_unix_us\": %lld, \"us\": %.1f}", i ? ", " : "", st[2 * i], st[2 * i + 1] / 10.0);
  printf("], \"spin\": %ld, \"spin_min_ns\": %lld, \"slow_spins\": [", spin, spin_min);
  for (long i = 0; i < nslow; i++)
    printf("%s{\"at_unix_us\": %lld, \"ns\": %lld}", i ? ", " : "", sl[2 * i], sl[2 * i + 1]);
  printf("]}\n");
  return 0;
}
