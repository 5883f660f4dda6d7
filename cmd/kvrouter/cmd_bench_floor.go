package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["floor"] = command{name: "floor", summary: "the bare decision of scripts/redis-floor, open loop at fixed rates: the floor under the end-to-end latency targets", run: runBenchFloor}
}

func runBenchFloor(ctx context.Context, args []string) error {
	fs := newFlagSet("bench floor", "bench floor --store redis://… (--rates R1,R2 | --rates half --clients 1,16) --route-keys K… --done-keys K… --route-args A… --done-args A…\n\n"+
		"Drives the bare decision of scripts/redis-floor/decision.lua (kvrouter_floor_route, then kvrouter_floor_done;\n"+
		"or another pair of its functions: --route-fn/--done-fn, e.g. the minimal deciding kvrouter_floor_min_*;\n"+
		"the library must be loaded: scripts/redis-floor.sh with OPENLOOP=… does all of it) open loop at each rate,\n"+
		"with the schedule and clock of `bench route --rate`; with --rates half, closed loop at each --clients count and\n"+
		"then open loop at half of its decisions/s, as `bench route --clients … --rate half`. Keys and arguments are separated by ASCII unit\n"+
		"separators (\\x1f). JSON on stdout, a line per run on stderr.")
	storeURL := storeFlag(fs)
	rates := fs.String("rates", "1000", "decisions per second, comma-separated: one open-loop run each; \"half\": half of each --clients closed-loop run's decisions/s")
	clients := fs.String("clients", "1,16", "with --rates half: the closed-loop client counts")
	dur := fs.Duration("duration", 4*time.Second, "each run's schedule")
	senders := fs.Int("senders", 64, "the most calls in flight")
	repeat := fs.Int("repeat", 3, "runs per rate")
	spinTail := spinTailFlag(fs)
	settleFor := settleFlag(fs, "before each open-loop run that follows a closed-loop one (--rates half), and before the first run of fixed --rates")
	routeKeys := fs.String("route-keys", "", "kvrouter_floor_route's keys")
	routeArgs := fs.String("route-args", "", "kvrouter_floor_route's arguments")
	doneKeys := fs.String("done-keys", "", "kvrouter_floor_done's keys")
	doneArgs := fs.String("done-args", "", "kvrouter_floor_done's arguments")
	routeFn := fs.String("route-fn", "kvrouter_floor_route", "the route function (kvrouter_floor_min_route: the least decision that chooses)")
	doneFn := fs.String("done-fn", "kvrouter_floor_done", "the done function (kvrouter_floor_min_done with kvrouter_floor_min_route)")
	noDone := fs.Bool("no-done", false, "call the route function alone, no done function (e.g. an empty route beside `bench route --no-done`: the client path alone)")
	prompts := fs.Int("prompts", 0, "with the minimal decision: index this many prompts first (6250: 1 M entries; bucket prefix = the first route key) and route them in turn instead of the one in --route-args; 0: that one")
	noFill := fs.Bool("no-fill", false, "with --prompts: the prompts are indexed already (an earlier run's fill, e.g. kept in an RDB by scripts/floor-instr.sh): route them without filling")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *spinTail < 0 || *settleFor < 0 {
		return fmt.Errorf("--spin-tail %v, --settle %v: want >= 0", *spinTail, *settleFor)
	}
	o := bench.FloorOptions{Duration: *dur, Senders: *senders, Repeat: *repeat, SpinTail: *spinTail, Settle: *settleFor, RouteFn: *routeFn, DoneFn: *doneFn, NoDone: *noDone,
		RouteKeys: split1f(*routeKeys), RouteArgs: split1f(*routeArgs), DoneKeys: split1f(*doneKeys), DoneArgs: split1f(*doneArgs), Log: os.Stderr}
	if strings.TrimSpace(*rates) == "half" {
		for _, f := range strings.Split(*clients, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || c <= 0 {
				return fmt.Errorf("--clients %q: want positive integers", *clients)
			}
			o.Clients = append(o.Clients, c)
		}
	}
	for _, f := range strings.Split(*rates, ",") {
		if len(o.Clients) > 0 {
			break
		}
		r, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || r <= 0 {
			return fmt.Errorf("--rates %q: want positive numbers", *rates)
		}
		o.Rates = append(o.Rates, r)
	}
	st, err := openStore(*storeURL, storeOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	rs, ok := st.(*statestore.Redis)
	if !ok {
		return fmt.Errorf("bench floor needs a Redis --store")
	}
	if *prompts < 0 {
		return fmt.Errorf("--prompts %d: want >= 0", *prompts)
	}
	if *prompts > 0 {
		if len(o.RouteKeys) == 0 {
			return fmt.Errorf("--prompts needs --route-keys (the first is the index bucket prefix)")
		}
		if *noFill {
			o.Prompts, err = bench.MinFloorPrompts(*prompts, 1)
		} else {
			o.Prompts, err = bench.FillMinFloor(ctx, rs, o.RouteKeys[0], *prompts, 1)
		}
		if err != nil {
			return err
		}
	}
	runs, err := bench.RunFloor(ctx, rs, o)
	if err != nil {
		return err
	}
	return printJSON(runs)
}

// split1f splits a flag value at ASCII unit separators; empty fields are kept (the floor's route takes
// empty arguments), an empty value is none.
func split1f(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, "\x1f")
}
