package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/simulation/sim"
)

func init() {
	register(command{name: "demo", summary: "the showcase: KV-aware routing vs round-robin and least-loaded on a real trace (table + chart)", run: runDemo})
}

func runDemo(ctx context.Context, args []string) error {
	fs := newFlagSet("demo", "demo [--out demo.png] [--rho-levels 0.4,0.55] [--trace FILE]")
	f := addSimFlags(fs, false)
	levels := fs.String("rho-levels", "0.4,0.55", "offered cache-blind utilisations rho0 to simulate (the default engines saturate near 0.6: see docs/EVALUATION.md)")
	policies := fs.String("policies", strings.Join([]string{sim.PolicyKV, sim.PolicyRoundRobin, sim.PolicyLeastLoaded}, ","), "policies to compare: "+strings.Join(sim.AllPolicies, ", "))
	out := fs.String("out", "demo.png", "chart file (.png or .svg)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	var rhos []float64
	for _, s := range splitList(*levels) {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || v <= 0 {
			return fmt.Errorf("--rho-levels: bad level %q", s)
		}
		rhos = append(rhos, v)
	}
	if len(rhos) == 0 {
		return fmt.Errorf("--rho-levels: no level")
	}
	eo, err := f.engineOptions()
	if err != nil {
		return err
	}
	pc, err := f.poolConfig(fs)
	if err != nil {
		return err
	}
	start := time.Now()
	reqs, name, err := sim.LoadTrace(*f.trace, f.synthetic())
	if err != nil {
		return fmt.Errorf("demo: trace %s: %w", *f.trace, err)
	}
	cfg := sim.Config{Workers: *f.workers, Engine: eo, Pool: pc, EventDelayMs: *f.eventDelay, Seed: *f.seed,
		Policies: splitList(*policies), Parallel: *f.parallel, NewStore: f.storeFactory(ctx), CheckEvents: *f.checkEvents}
	var reps []*sim.Report
	var works []*sim.Workload
	total := 0
	for _, rho := range rhos {
		w, err := sim.NewWorkload(name, reqs, sim.LoadOptions{Skip: *f.skip, Requests: *f.requests, Rho: rho,
			Seed: *f.seed, EngineBlock: *f.engineBlock}, eo, *f.workers)
		if err != nil {
			return err
		}
		works = append(works, w)
		total += len(w.Reqs) * len(cfg.Policies)
	}
	err = withProgress(*f.progress, total, &cfg, func() error {
		for _, w := range works {
			rep, err := sim.Run(ctx, cfg, w)
			if err != nil {
				return err
			}
			reps = append(reps, rep)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, rep := range reps {
		if i > 0 {
			fmt.Println()
		}
		if err := rep.WriteTable(os.Stdout); err != nil {
			return err
		}
		summarize(rep)
	}
	if err := sim.WriteChart(*out, reps); err != nil {
		return err
	}
	fmt.Printf("\n%s.\nchart: %s   (%.1f s)\n", sim.Headline(reps), *out, time.Since(start).Seconds())
	return nil
}

// summarize prints kv's gains over the best cache-blind baseline of a report.
func summarize(rep *sim.Report) {
	g, ok := rep.KVGain()
	if !ok {
		return
	}
	fmt.Printf("→ kv vs best cache-blind (%s): mean TTFT %.2fx lower, p99 %.2fx lower, %.1fx the hit rate\n",
		g.Baseline, g.TTFTMean, g.TTFTP99, g.HitRate)
}
