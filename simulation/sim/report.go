package sim

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/statestore"
)

// EngineParams are the engines' parameters as reported (engine.Options with JSON names).
type EngineParams struct {
	BlockSize           int     `json:"block_size"`
	NumBlocks           int     `json:"num_blocks"`
	KVTokens            int     `json:"kv_tokens"`
	MaxNumBatchedTokens int     `json:"max_num_batched_tokens"`
	MaxNumSeqs          int     `json:"max_num_seqs"`
	StepOverheadMs      float64 `json:"step_overhead_ms"`
	PrefillMsPerToken   float64 `json:"prefill_ms_per_token"`
	DecodeMsPerSeq      float64 `json:"decode_ms_per_seq"`
	ContextMsPerToken   float64 `json:"context_ms_per_token"`
	// PrefillTokensPerS is one engine's prefill capacity (full chunks back to back), the unit of ρ0.
	PrefillTokensPerS float64 `json:"prefill_tokens_per_s"`
}

func engineParams(o engine.Options) EngineParams {
	return EngineParams{BlockSize: o.BlockSize, NumBlocks: o.NumBlocks, KVTokens: o.NumBlocks * o.BlockSize,
		MaxNumBatchedTokens: o.MaxNumBatchedTokens, MaxNumSeqs: o.MaxNumSeqs, StepOverheadMs: o.StepOverheadMs,
		PrefillMsPerToken: o.PrefillMsPerToken, DecodeMsPerSeq: o.DecodeMsPerSeq, ContextMsPerToken: o.ContextMsPerToken,
		PrefillTokensPerS: PrefillCapacity(o) * 1000}
}

// Report is the outcome of Run: the workload, the fleet, and one result per policy.
type Report struct {
	Trace       string  `json:"trace"`
	Requests    int     `json:"requests"`
	Workers     int     `json:"workers"`
	EngineBlock int     `json:"engine_block"`
	Seed        uint64  `json:"seed"`
	Speedup     float64 `json:"speedup,omitempty"`
	RateReqS    float64 `json:"rate_req_per_s,omitempty"`
	SpanS       float64 `json:"span_s"`
	Rho0        float64 `json:"rho0"`
	// RhoWork is the offered total-work utilisation, prefill + decode (Workload.RhoWork): ≥ 1 means
	// overloaded on any trace; ρ0 counts prefill only.
	RhoWork      float64 `json:"rho_work"`
	EventDelayMs float64 `json:"event_delay_ms"`
	Store        string  `json:"store"`
	// MeanInputTokens and MeanOutputTokens describe the workload.
	MeanInputTokens  float64 `json:"mean_input_tokens"`
	MeanOutputTokens float64 `json:"mean_output_tokens"`
	// ReuseBound is the infinite-cache bound at the engine block size (traces.ReuseBound).
	ReuseBound struct {
		Blocks float64 `json:"blocks"`
		Tokens float64 `json:"tokens"`
	} `json:"reuse_bound"`
	Engine   EngineParams          `json:"engine"`
	Router   statestore.PoolConfig `json:"router"`
	Policies []PolicyResult        `json:"policies"`
}

// Policy returns the named policy's result, or nil.
func (rep *Report) Policy(name string) *PolicyResult {
	for i := range rep.Policies {
		if rep.Policies[i].Policy == name {
			return &rep.Policies[i]
		}
	}
	return nil
}

// Run simulates every configured policy on w (in parallel up to cfg.Parallel, each on its own
// fleet, store and random stream) and reports them in cfg.Policies order. The report is a pure
// function of (cfg, w) unless cfg.Timing is set.
func Run(ctx context.Context, cfg Config, w *Workload) (*Report, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(w); err != nil {
		return nil, err
	}
	rep := &Report{Trace: w.Name, Requests: len(w.Reqs), Workers: cfg.Workers, EngineBlock: w.EngineBlock, Seed: cfg.Seed,
		Speedup: w.Speedup, RateReqS: w.Rate, SpanS: w.SpanMs / 1000, Rho0: w.Rho0(cfg.Engine, cfg.Workers),
		RhoWork:      w.RhoWork(cfg.Engine, cfg.Workers),
		EventDelayMs: cfg.EventDelayMs, Engine: engineParams(cfg.Engine), Router: cfg.Pool,
		MeanInputTokens: float64(w.InputTokens) / float64(len(w.Reqs)), MeanOutputTokens: float64(w.OutputTokens) / float64(len(w.Reqs))}
	rep.ReuseBound.Blocks, rep.ReuseBound.Tokens = w.ReuseBlocks, w.ReuseTokens
	rep.Store = "memory"
	rep.Policies = make([]PolicyResult, len(cfg.Policies))
	errs := make([]error, len(cfg.Policies))
	sem := make(chan struct{}, cfg.Parallel)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, p := range cfg.Policies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r, err := newRun(ctx, cfg, w, p)
			if err == nil {
				if r.store != nil {
					rep.setStore(r.store.Name())
				}
				err = r.simulate()
			}
			if err != nil {
				errs[i] = fmt.Errorf("policy %s: %w", p, err)
				cancel()
				return
			}
			rep.Policies[i] = r.result()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

var storeNameMu sync.Mutex

func (rep *Report) setStore(name string) {
	storeNameMu.Lock()
	defer storeNameMu.Unlock()
	if strings.HasPrefix(name, "memory") {
		name = "memory"
	}
	rep.Store = name
}

// WriteTable prints the report as a human table.
func (rep *Report) WriteTable(out io.Writer) error {
	fmt.Fprintf(out, "%s: %d requests, %d workers, engine block %d, KV %d tokens/worker, rho0 %.2f (prefill), rho_work %.2f (prefill + decode)",
		rep.Trace, rep.Requests, rep.Workers, rep.EngineBlock, rep.Engine.KVTokens, rep.Rho0, rep.RhoWork)
	if rep.Speedup > 0 {
		fmt.Fprintf(out, " (speedup %.2f)", rep.Speedup)
	} else {
		fmt.Fprintf(out, " (Poisson %.2f req/s)", rep.RateReqS)
	}
	fmt.Fprintf(out, ", event delay %g ms, store %s, seed %d\n", rep.EventDelayMs, rep.Store, rep.Seed)
	fmt.Fprintf(out, "infinite-cache bound: %.2f %% of blocks, %.2f %% of tokens\n\n", 100*rep.ReuseBound.Blocks, 100*rep.ReuseBound.Tokens)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\thit blk %\tvs bound\tTTFT mean s\tp50 s\tp90 s\tp99 s\tITL mean ms\tITL p99 ms\te2e mean s\tout tok/s\tprefill Mtok\timbalance\tpreempt\tdecision µs\t")
	for _, p := range rep.Policies {
		fmt.Fprintf(tw, "%s\t%.2f\t%.1f %%\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.2f\t%.0f\t%.1f\t%.3f\t%d\t%.1f\t\n",
			p.Policy, 100*p.BlockHitRate, 100*p.BlockHitVsBound, p.TTFT.Mean/1000, p.TTFT.P50/1000, p.TTFT.P90/1000,
			p.TTFT.P99/1000, p.ITL.Mean, p.ITL.P99, p.E2E.Mean/1000, p.OutputTokS, float64(p.PrefillTokens)/1e6,
			p.LoadImbalance, p.Preemptions, p.decision.Mean)
	}
	return tw.Flush()
}
