package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/sim"
	"github.com/kvrouter/kvrouter/simulation/traces"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	register(command{name: "simulate", summary: "discrete-event fleet simulation of routing policies on a trace (quality metrics)", run: runSimulate})
}

// defaultTrace is the Mooncake conversation trace embedded in the binary: simulate and demo work from
// any directory.
const defaultTrace = traces.MooncakeConversation

// simFlags are the flags simulate and demo share.
type simFlags struct {
	trace                       *string
	workers, engineBlock        *int
	kvTokens, kvBlocks          *int
	maxBatched, maxSeqs         *int
	stepOverhead, prefillMs     *float64
	decodeMs, contextMs         *float64
	credit, prefillScale, decay *float64
	requestWeight, temperature  *float64
	busyPrefill, busyDecode     *float64
	approxTTL, predictedTTL     *int64
	leaseTTL                    *int64
	preset                      *string
	eventDelay                  *float64
	seed                        *uint64
	parallel                    *int
	synthApps                   *int
	synthContinue               *float64
	progress                    *bool
	skip, requests, fanout      *int
	speedup, rate, rho          *float64
	checkEvents                 *bool
	storeURL                    *string
	policies                    *string
	workload                    *string
	ttftStart                   statestore.TTFTCoeffs
	ttftWarmup                  *int
	gen                         traces.GenerateOptions
	timing                      *bool
	jsonOut                     *bool
}

func addSimFlags(fs *flag.FlagSet, withLoad bool) *simFlags {
	f := &simFlags{}
	f.trace = fs.String("trace", defaultTrace, "trace: a Mooncake JSONL file (.jsonl or .jsonl.gz), an Azure CSV (.csv or .csv.gz: given synthetic prefixes), or "+defaultTrace+" (embedded)")
	f.workers = fs.Int("workers", 8, "simulated engines")
	f.engineBlock = fs.Int("engine-block", 64, "engine KV block size, tokens: 16, 64 or 512 (the trace's 512-token blocks are split)")
	f.kvTokens = fs.Int("kv-tokens", engine.DefaultKVTokens, "KV cache per engine, tokens (Llama-3.1-8B on one H100-80GB)")
	f.kvBlocks = fs.Int("kv-blocks", 0, "KV cache per engine, blocks (overrides --kv-tokens)")
	f.maxBatched = fs.Int("max-batched-tokens", 8192, "per-step token budget (chunked prefill), vLLM's --max-num-batched-tokens")
	f.maxSeqs = fs.Int("max-seqs", 256, "running requests per engine, vLLM's --max-num-seqs")
	f.stepOverhead = fs.Float64("step-overhead-ms", 6, "fixed cost of an engine step, ms")
	f.prefillMs = fs.Float64("prefill-ms-per-token", 0.025, "cost of one computed prompt token, ms")
	f.decodeMs = fs.Float64("decode-ms-per-seq", 0.025, "cost of one decoding request in a step, ms")
	f.contextMs = fs.Float64("context-ms-per-token", 0.00004, "cost of one token of attended context in a step, ms")
	f.credit = fs.Float64("overlap-credit", 1.0, "router: overlap_score_credit")
	f.prefillScale = fs.Float64("prefill-load-scale", 1.0, "router: prefill_load_scale")
	f.decay = fs.Float64("credit-decay", 0, "router: overlap_score_credit_decay")
	f.requestWeight = fs.Float64("request-weight", 0, "router: decode_active_request_weight")
	f.temperature = fs.Float64("temperature", 0, "router: temperature (0 = minimum cost, ties broken by the seeded random number)")
	f.busyPrefill = fs.Float64("busy-prefill-fraction", 0, "router: busy_prefill_fraction (0 = off)")
	f.busyDecode = fs.Float64("busy-decode-fraction", 0, "router: busy_decode_fraction (0 = off)")
	f.approxTTL = fs.Int64("approx-ttl-ms", 120000, "router: approx_ttl_ms (kv-approx)")
	f.predictedTTL = fs.Int64("predicted-ttl-ms", sim.DefaultPredictedTTLMs, "router: predicted_ttl_ms (kv-predict, ttft-predict and ttft-sim-predict only)")
	f.leaseTTL = fs.Int64("lease-ttl-ms", statestore.MaxTTLMs, "router: lease_ttl_ms (default: 30 days, so that long queues never expire leases)")
	f.preset = fs.String("preset", "", "router preset applied before the knob flags given: load-aware or agentic")
	f.eventDelay = fs.Float64("event-delay-ms", 0, "delay from a step's end until the router applies its KV events, ms")
	f.seed = fs.Uint64("seed", 1, "seed of every random draw (tie-breaks, random policy, Poisson arrivals, synthetic prefixes)")
	f.parallel = fs.Int("parallel", runtime.GOMAXPROCS(0), "policies simulated at once")
	f.synthApps = fs.Int("synthetic-apps", 64, "Azure traces: applications (system prompts) of the synthetic prefix tree")
	f.synthContinue = fs.Float64("synthetic-continue", 0.5, "Azure traces: probability that a request continues a conversation")
	f.progress = fs.Bool("progress", true, "progress bar on stderr for runs longer than a second")
	f.checkEvents = fs.Bool("check-events", false, "verify that every Stored block is later Removed or still resident")
	f.storeURL = storeFlag(fs)
	f.skip = fs.Int("skip", 0, "drop the trace's first N requests")
	f.requests = fs.Int("requests", 0, "simulate at most N requests after --skip (0 = all)")
	if withLoad {
		f.fanout = fs.Int("fanout", 1, "siblings per trace request, same prompt, same arrival (best-of-N / agent fan-out bursts)")
		f.speedup = fs.Float64("speedup", 1, "divide the trace's inter-arrival times by this")
		f.rate = fs.Float64("rate", 0, "Poisson arrivals at this many requests/s instead of the trace's timestamps (seeded)")
		f.rho = fs.Float64("rho", 0, "pick the speedup (or scale --rate) so that the offered cache-blind utilisation rho0 is this")
		f.workload = fs.String("workload", "", "generate a seeded workload instead of reading --trace: "+strings.Join(traces.WorkloadKinds, ", ")+
			" (--requests sets its size, default 2000; --seed its draws; docs/EVALUATION.md describes the shapes)")
		fs.IntVar(&f.gen.Prefixes, "wl-prefixes", 0, "generated workload: distinct shared (system or agent) prompts (default 64 shared-prefix, 4 multi-turn and fanout)")
		fs.IntVar(&f.gen.PrefixTokens, "wl-prefix-tokens", 0, "generated workload: tokens of each shared prompt, whole 512-token blocks (default 8192 / 1024 / 2048)")
		fs.IntVar(&f.gen.UserTokens, "wl-user-tokens", 0, "generated workload: mean unshared tokens per request: question, turn message, task context (default 512 / 256 / 4096)")
		fs.IntVar(&f.gen.OutputTokens, "wl-output-tokens", 0, "generated workload: mean output tokens (default 256)")
		fs.IntVar(&f.gen.Turns, "wl-turns", 0, "multi-turn: mean turns per conversation (default 6)")
		fs.Float64Var(&f.gen.ThinkMs, "wl-think-ms", 0, "multi-turn: mean time between turns, ms, before --rho scaling (default 20000)")
		fs.IntVar(&f.gen.Siblings, "wl-siblings", 0, "fanout: requests per task, one prompt, one arrival (default 8)")
		fs.Float64Var(&f.ttftStart.PrefillRate, "ttft-prefill-rate", 0, "ttft, ttft-predict: the pool's ttft_prefill_rate; ttft-sim: every worker's starting prefill_rate; tokens/s (0 = the engine's prefill capacity)")
		fs.Float64Var(&f.ttftStart.DecodeCoeff, "ttft-decode-coeff", 0, "ttft, ttft-predict: the pool's ttft_decode_coeff; ttft-sim: every worker's starting decode_coeff; s per active decode block (0 = engine block × context cost per token)")
		f.ttftWarmup = fs.Int("ttft-warmup", 200, "ttft policies: calibration samples a worker takes before its predictions count in ttft_model")
		f.policies = fs.String("policies", strings.Join(sim.AllPolicies, ","), "comma-separated policies: "+strings.Join(sim.AllPolicies, ", "))
		f.timing = fs.Bool("timing", false, "include wall-clock router decision times in the JSON (not reproducible; default on with a Redis store)")
		f.jsonOut = fs.Bool("json", false, "print the report as JSON instead of a table")
	}
	return f
}

func (f *simFlags) engineOptions() (engine.Options, error) {
	eo := engine.Options{BlockSize: *f.engineBlock, NumBlocks: *f.kvBlocks, MaxNumBatchedTokens: *f.maxBatched,
		MaxNumSeqs: *f.maxSeqs, StepOverheadMs: *f.stepOverhead, PrefillMsPerToken: *f.prefillMs,
		DecodeMsPerSeq: *f.decodeMs, ContextMsPerToken: *f.contextMs}
	if *f.engineBlock != 16 && *f.engineBlock != 64 && *f.engineBlock != 512 {
		return eo, fmt.Errorf("--engine-block must be 16, 64 or 512, got %d", *f.engineBlock)
	}
	if eo.NumBlocks == 0 {
		if *f.kvTokens < *f.engineBlock {
			return eo, fmt.Errorf("--kv-tokens %d is less than one block", *f.kvTokens)
		}
		eo.NumBlocks = *f.kvTokens / *f.engineBlock
	}
	if err := eo.Validate(); err != nil {
		return eo, err
	}
	return eo.WithDefaults(), nil
}

// poolConfig builds the router knobs: defaults, then the preset, then every knob flag set explicitly.
func (f *simFlags) poolConfig(fs *flag.FlagSet) (statestore.PoolConfig, error) {
	cfg := statestore.DefaultPoolConfig(*f.engineBlock)
	cfg, err := core.ApplyPreset(cfg, *f.preset)
	if err != nil {
		return cfg, err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, k := range []struct {
		name string
		dst  *float64
		v    float64
	}{
		{"overlap-credit", &cfg.OverlapScoreCredit, *f.credit},
		{"prefill-load-scale", &cfg.PrefillLoadScale, *f.prefillScale},
		{"credit-decay", &cfg.OverlapScoreCreditDecay, *f.decay},
		{"request-weight", &cfg.DecodeActiveRequestWeight, *f.requestWeight},
		{"temperature", &cfg.Temperature, *f.temperature},
	} {
		if *f.preset == "" || set[k.name] {
			*k.dst = k.v
		}
	}
	cfg.BusyPrefillFraction, cfg.BusyDecodeFraction = *f.busyPrefill, *f.busyDecode
	cfg.ApproxTTLMs, cfg.PredictedTTLMs, cfg.LeaseTTLMs = *f.approxTTL, *f.predictedTTL, *f.leaseTTL
	return cfg, cfg.Validate()
}

// loadRequests generates the --workload, or reads the --trace.
func (f *simFlags) loadRequests() ([]traces.Request, string, error) {
	if f.workload == nil || *f.workload == "" {
		return sim.LoadTrace(*f.trace, f.synthetic())
	}
	o := f.gen
	o.Kind, o.Seed, o.Requests = *f.workload, *f.seed, *f.skip+*f.requests
	if *f.requests == 0 {
		o.Requests = *f.skip + 2000
	}
	reqs, err := traces.Generate(o)
	return reqs, "generated " + *f.workload + " workload", err
}

func (f *simFlags) synthetic() traces.SyntheticOptions {
	return traces.SyntheticOptions{Seed: *f.seed, Apps: *f.synthApps, ContinueProbability: *f.synthContinue}
}

// storeFactory returns Config.NewStore for --store.
func (f *simFlags) storeFactory(ctx context.Context) func() (statestore.Store, error) {
	url := *f.storeURL
	return func() (statestore.Store, error) { return openStore(url, storeOptions{fresh: true}) }
}

func runSimulate(ctx context.Context, args []string) error {
	fs := newFlagSet("simulate", "simulate [--trace FILE | --workload shared-prefix|multi-turn|fanout|mix] [--workers 8] [--engine-block 64] [--rho 0.8 | --speedup S | --rate R] [--policies kv,round-robin,...] [--json]")
	f := addSimFlags(fs, true)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	eo, err := f.engineOptions()
	if err != nil {
		return err
	}
	pc, err := f.poolConfig(fs)
	if err != nil {
		return err
	}
	reqs, name, err := f.loadRequests()
	if err != nil {
		return err
	}
	w, err := sim.NewWorkload(name, reqs, sim.LoadOptions{Skip: *f.skip, Requests: *f.requests, Fanout: *f.fanout,
		Speedup: *f.speedup, Rate: *f.rate, Rho: *f.rho, Seed: *f.seed, EngineBlock: *f.engineBlock}, eo, *f.workers)
	if err != nil {
		return err
	}
	timing := *f.timing
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !set["timing"] && *f.storeURL != "memory" && *f.storeURL != "" {
		timing = true
	}
	cfg := sim.Config{Workers: *f.workers, Engine: eo, Pool: pc, EventDelayMs: *f.eventDelay, Seed: *f.seed,
		Policies: splitList(*f.policies), Parallel: *f.parallel, NewStore: f.storeFactory(ctx), Timing: timing,
		CheckEvents: *f.checkEvents, TTFTStart: f.ttftStart, TTFTWarmup: *f.ttftWarmup}
	var rep *sim.Report
	err = withProgress(*f.progress, len(cfg.Policies)*len(w.Reqs), &cfg, func() error {
		var err error
		rep, err = sim.Run(ctx, cfg, w)
		return err
	})
	if err != nil {
		return err
	}
	if *f.jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteTable(os.Stdout)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// withProgress runs fn, drawing a progress bar on stderr once it has run for a second (total is
// the number of requests to route over all policies). It chains cfg.Progress.
func withProgress(enabled bool, total int, cfg *sim.Config, fn func() error) error {
	if !enabled || total == 0 {
		return fn()
	}
	var mu sync.Mutex
	done := map[string]int{}
	var routed atomic.Int64
	prev := cfg.Progress
	cfg.Progress = func(policy string, n int) {
		mu.Lock()
		if n < done[policy] { // the same policy in a later run (demo levels)
			done[policy] = 0
		}
		routed.Add(int64(n - done[policy]))
		done[policy] = n
		mu.Unlock()
		if prev != nil {
			prev(policy, n)
		}
	}
	stop := make(chan struct{})
	finished := make(chan struct{})
	start := time.Now()
	tty := isTerminal(os.Stderr)
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		drawn, lastPct := false, -1
		for {
			select {
			case <-stop:
				if drawn && tty {
					fmt.Fprintf(os.Stderr, "\r%s\r", strings.Repeat(" ", 72))
				}
				return
			case <-tick.C:
			}
			el := time.Since(start)
			if el < time.Second {
				continue
			}
			frac := min(float64(routed.Load())/float64(total), 1)
			pct := int(frac * 100)
			const width = 40
			bar := strings.Repeat("=", int(frac*width)) + strings.Repeat(" ", width-int(frac*width))
			switch {
			case tty:
				fmt.Fprintf(os.Stderr, "\rsimulating [%s] %3d%% %5.1fs", bar, pct, el.Seconds())
			case pct/10 != lastPct/10: // not a terminal: a line every 10 %
				fmt.Fprintf(os.Stderr, "simulating [%s] %3d%% %5.1fs\n", bar, pct, el.Seconds())
			}
			drawn, lastPct = true, pct
		}
	}()
	err := fn()
	close(stop)
	<-finished
	return err
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
