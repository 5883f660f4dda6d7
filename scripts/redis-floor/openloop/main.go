// Command openloop drives scripts/redis-floor/decision.lua's bare decision (kvrouter_floor_route, then
// kvrouter_floor_done, one atomic call each, none of kvrouter's logic) at fixed rates, open loop, with
// the same schedule and clock as `kvrouter bench route --rate` (internal/bench.FixedRate): the latency of
// the route call from its scheduled time, p50/p99/max, beside the send lag and the service time, and
// the Redis CPU per decision (INFO cpu delta). This is the floor under SPEC §9's end-to-end latency
// targets (p50 ≤ 200 µs, p99 ≤ 1 ms at half of saturation): what any design that books inside Redis
// gets from this machine and this client at the same rate. Run by scripts/redis-floor.sh (OPENLOOP=…),
// which starts the server, loads the library and passes the key lists.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/redis/rueidis"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7341", "the floor's Redis (one scripts/redis-floor.sh started)")
	rates := flag.String("rates", "1000", "decisions per second, comma-separated: one open-loop run each")
	dur := flag.Duration("duration", 4*time.Second, "each run's schedule")
	senders := flag.Int("senders", 64, "the most calls in flight (kvrouter bench route's default)")
	repeat := flag.Int("repeat", 3, "runs per rate")
	routeKeys := flag.String("route-keys", "", "route's 26 keys, space-separated")
	doneKeys := flag.String("done-keys", "", "done's 13 keys, space-separated")
	noPipe := flag.Bool("no-autopipelining", false, "rueidis DisableAutoPipelining: each call on a pooled connection of its own")
	routeArgs := flag.String("route-args", "", "route's arguments, separated by ASCII unit separators (\\x1f)")
	flag.Parse()
	if err := run(*noPipe, *addr, *rates, *dur, *senders, *repeat, strings.Fields(*routeKeys), strings.Fields(*doneKeys), strings.Split(*routeArgs, "\x1f")); err != nil {
		fmt.Fprintln(os.Stderr, "openloop:", err)
		os.Exit(1)
	}
}

func run(noPipe bool, addr, rates string, d time.Duration, senders, repeat int, rk, dk, ra []string) error {
	if len(rk) == 0 || len(dk) == 0 || len(ra) < 5 {
		return fmt.Errorf("route-keys, done-keys and route-args are required (scripts/redis-floor.sh passes them)")
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, DisableAutoPipelining: noPipe})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx := context.Background()
	cpu := func() (float64, error) {
		s, err := c.Do(ctx, c.B().Info().Section("cpu").Build()).ToString()
		if err != nil {
			return 0, err
		}
		var t float64
		for _, l := range strings.Split(s, "\r\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				t += f
			}
		}
		return t, nil
	}
	route := c.B().Fcall().Function("kvrouter_floor_route").Numkeys(int64(len(rk))).Key(rk...).Arg(ra...).Build().Pin()
	done := c.B().Fcall().Function("kvrouter_floor_done").Numkeys(int64(len(dk))).Key(dk...).Arg(ra[1], ra[4]).Build().Pin()
	fmt.Printf("%-8s %-6s %9s %9s %9s %9s %11s %11s %14s  %s\n", "rate/s", "run", "p50 µs", "p99 µs", "max µs", "lag p50", "service p50", "service p99", "Redis CPU µs", "load")
	for _, f := range strings.Split(rates, ",") {
		rate, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || rate <= 0 {
			return fmt.Errorf("rate %q: want a positive number", f)
		}
		for r := 1; r <= repeat; r++ {
			call := func(_, _ int) (time.Time, time.Time, error) {
				t0 := time.Now()
				if err := c.Do(ctx, route).Error(); err != nil {
					return t0, t0, err
				}
				t1 := time.Now()
				return t0, t1, c.Do(ctx, done).Error()
			}
			a, err := cpu()
			if err != nil {
				return err
			}
			lat, lag, svc, err := bench.FixedRate(ctx, senders, rate, d, call)
			if err != nil {
				return err
			}
			b, err := cpu()
			if err != nil {
				return err
			}
			load, _ := os.ReadFile("/proc/loadavg")
			q := func(s []time.Duration, p float64) float64 {
				slices.Sort(s)
				if len(s) == 0 {
					return 0
				}
				return float64(s[int(p*float64(len(s)-1))].Nanoseconds()) / 1e3
			}
			fmt.Printf("%-8.0f %-6d %9.0f %9.0f %9.0f %9.0f %11.0f %11.0f %14.1f  %s\n", rate, r, q(lat, 0.5), q(lat, 0.99), q(lat, 1),
				q(lag, 0.5), q(svc, 0.5), q(svc, 0.99), (b-a)*1e6/float64(len(lat)), strings.Join(strings.Fields(string(load))[:3], " "))
		}
	}
	return nil
}
