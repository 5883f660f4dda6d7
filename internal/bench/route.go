package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// RouteOptions configure RunRoute.
type RouteOptions struct {
	// Workers in the pool; Blocks indexed (block, worker) entries in chains of max(PromptBlocks, 64).
	Workers, Blocks int
	// PromptBlocks per decision: a chain's first PromptBlocks, diverging at a random block half the time.
	PromptBlocks int
	// Clients: one run per count, that many concurrent clients each.
	Clients []int
	// Duration of each run, unless Routes > 0: then each client makes exactly Routes decisions.
	Duration time.Duration
	Routes   int
	// PredictedTTLMs is the pool's predicted_ttl_ms (predict-on-route books soft entries); 0 = off.
	PredictedTTLMs int64
	// Reuse keeps an index already in the store (the pool exists, e.g. under a fixed Redis prefix from
	// an earlier run) instead of loading it again.
	Reuse bool
	// Rounds repeats every (variant, clients) run, variants alternated within a round. Default 1.
	Rounds int
}

// RouteVariant is one store to time: the embedded route script, or a variant of it (Redis).
type RouteVariant struct {
	Name  string
	Store statestore.Store
}

// RouteRun is one run's measurements.
type RouteRun struct {
	Variant         string  `json:"variant,omitempty"`
	Round           int     `json:"round,omitempty"`
	Clients         int     `json:"clients"`
	Decisions       int     `json:"decisions"`
	DecisionsPerS   float64 `json:"decisions_per_s"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
	RedisUsPerCall  float64 `json:"redis_us_per_decision,omitempty"`
	RedisCallsTotal float64 `json:"redis_calls,omitempty"`
}

// RouteReport is what `kvrouter bench route` prints.
type RouteReport struct {
	Bench          string     `json:"bench"`
	Store          string     `json:"store"`
	Workers        int        `json:"workers"`
	IndexedBlocks  int        `json:"indexed_blocks"`
	PromptBlocks   int        `json:"prompt_blocks"`
	PredictedTTLMs int64      `json:"predicted_ttl_ms"`
	IndexReused    bool       `json:"index_reused,omitempty"`
	LoadSeconds    float64    `json:"index_load_seconds"`
	Runs           []RouteRun `json:"runs"`
}

// RunRoute loads a synthetic index through the first variant's store (all variants must share the
// namespace), then times decisions per variant, client count and round. For a Redis store it also
// reports Redis µs per decision from INFO commandstats (stats reset before each run; only the route
// script runs as EVALSHA during one).
func RunRoute(ctx context.Context, variants []RouteVariant, o RouteOptions) (RouteReport, error) {
	rep := RouteReport{Bench: "route", Workers: o.Workers, IndexedBlocks: o.Blocks, PromptBlocks: o.PromptBlocks, PredictedTTLMs: o.PredictedTTLMs}
	if len(variants) == 0 || o.Workers <= 0 || o.Blocks <= 0 || o.PromptBlocks <= 0 || len(o.Clients) == 0 || (o.Duration <= 0 && o.Routes <= 0) {
		return rep, errors.New("variants, workers, blocks, prompt blocks, clients and a duration or route count must be > 0")
	}
	rep.Store = variants[0].Store.Name()
	b := NewSyntheticIndex(o.Workers, o.Blocks, max(o.PromptBlocks, 64), 1)
	b.PredictedTTLMs = o.PredictedTTLMs
	st := variants[0].Store
	if _, err := st.GetPool(ctx, b.Pool); err == nil && o.Reuse {
		rep.IndexReused = true
	} else {
		if err := b.Setup(ctx, st); err != nil {
			return rep, err
		}
		start := time.Now()
		if _, err := b.Load(ctx, st, 8); err != nil {
			return rep, err
		}
		rep.LoadSeconds = time.Since(start).Seconds()
	}
	for round := 1; round <= max(o.Rounds, 1); round++ {
		for _, v := range variants {
			for _, clients := range o.Clients {
				run, err := routeRun(ctx, v.Store, b, o, clients, round)
				if err != nil {
					return rep, fmt.Errorf("variant %s: %w", v.Name, err)
				}
				if len(variants) > 1 {
					run.Variant = v.Name
				}
				if o.Rounds > 1 {
					run.Round = round
				}
				rep.Runs = append(rep.Runs, run)
			}
		}
	}
	return rep, nil
}

// routeRun is one timed run of `clients` concurrent deciders on st.
func routeRun(ctx context.Context, st statestore.Store, b *SyntheticIndex, o RouteOptions, clients, round int) (RouteRun, error) {
	run := RouteRun{Clients: clients}
	rs, _ := st.(*statestore.Redis)
	if rs != nil {
		// One untimed query first, so a variant script is loaded (EVAL on NOSCRIPT) before the stats reset.
		if _, err := rs.Overlap(ctx, b.Pool, []uint64{1}, time.Now().UnixMilli()); err != nil {
			return run, err
		}
		if err := rs.ResetStats(ctx); err != nil {
			return run, err
		}
	}
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	deadline := time.Now().Add(o.Duration)
	more := func(i int) bool {
		if o.Routes > 0 {
			return i < o.Routes
		}
		return time.Now().Before(deadline)
	}
	start := time.Now()
	errc := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), uint64(clients)))
			var mine []time.Duration
			for i := 0; more(i) && ctx.Err() == nil; i++ {
				chain := b.Chains[r.IntN(len(b.Chains))]
				local := chain[:o.PromptBlocks]
				if r.IntN(2) == 0 { // half the prompts diverge somewhere
					local = append([]uint64(nil), local...)
					local[r.IntN(len(local))] ^= 1
				}
				seq := blockhash.Sequence(nil, local)
				req := statestore.RouteRequest{Pool: b.Pool, RequestID: fmt.Sprintf("r%d-c%d-%d-%d-%d", round, clients, c, i, time.Now().UnixNano()),
					SeqHashes: seq, ISL: int64(len(seq) * b.BlockSize), Random: r.Float64(), NowMs: time.Now().UnixMilli()}
				t0 := time.Now()
				_, err := st.Route(ctx, req)
				mine = append(mine, time.Since(t0))
				if err != nil {
					errc <- err
					return
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}(c)
	}
	wg.Wait()
	el := time.Since(start)
	close(errc)
	for err := range errc {
		return run, err
	}
	sortDurations(lat)
	run.Decisions, run.DecisionsPerS = len(lat), float64(len(lat))/el.Seconds()
	run.P50us, run.P99us = quantileUs(lat, 0.50), quantileUs(lat, 0.99)
	if rs != nil {
		// Decisions are FCALLs of the library; --route-script variants are EVALSHAs.
		for _, cmd := range []string{"fcall", "evalsha"} {
			if calls, usec, err := rs.CommandStats(ctx, cmd); err == nil && calls > 0 {
				run.RedisUsPerCall, run.RedisCallsTotal = usec/calls, calls
			}
		}
	}
	return run, nil
}
