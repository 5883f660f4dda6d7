package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["route"] = command{name: "route", summary: "routing decisions: decisions/s, client p50/p99 µs, Redis µs per decision", run: runBenchRoute}
}

type routeRun struct {
	Clients         int     `json:"clients"`
	Decisions       int     `json:"decisions"`
	DecisionsPerS   float64 `json:"decisions_per_s"`
	P50us           float64 `json:"p50_us"`
	P99us           float64 `json:"p99_us"`
	RedisUsPerCall  float64 `json:"redis_us_per_decision,omitempty"`
	RedisCallsTotal float64 `json:"redis_calls,omitempty"`
}

func runBenchRoute(ctx context.Context, args []string) error {
	fs := newFlagSet("bench route", "bench route [--store memory|redis://…] [--workers N] [--blocks M] [--prompt B] [--clients 1,16,64] [--duration D] [--predicted-ttl D]")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 64, "workers in the pool")
	blocks := fs.Int("blocks", 1000000, "indexed (block, worker) entries")
	prompt := fs.Int("prompt", 64, "blocks per prompt")
	clientsFlag := fs.String("clients", "1,16,64", "comma-separated concurrent client counts, one run each")
	duration := fs.Duration("duration", 3*time.Second, "length of each run")
	predTTL := fs.Duration("predicted-ttl", 0, "pool predicted_ttl (predict-on-route: each decision books the prompt's blocks as soft entries); 0 = off")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	clientCounts, err := parseCounts("clients", *clientsFlag)
	if err != nil {
		return err
	}
	st, err := openStore(*storeURL, storeOptions{fresh: true})
	if err != nil {
		return err
	}
	defer st.Close()
	b := newBenchIndex(*workers, *blocks, max(*prompt, 64), 1)
	b.predictedTTLMs = predTTL.Milliseconds()
	if err := b.setup(ctx, st); err != nil {
		return err
	}
	loadStart := time.Now()
	if _, err := b.load(ctx, st, 8); err != nil {
		return err
	}
	loadSecs := time.Since(loadStart).Seconds()
	rs, _ := st.(*statestore.Redis)
	var runs []routeRun
	for _, clients := range clientCounts {
		if rs != nil {
			if err := rs.ResetStats(ctx); err != nil {
				return err
			}
		}
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		deadline := time.Now().Add(*duration)
		start := time.Now()
		errc := make(chan error, clients)
		for c := 0; c < clients; c++ {
			wg.Add(1)
			go func(c int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(c), uint64(clients)))
				var mine []time.Duration
				for i := 0; time.Now().Before(deadline); i++ {
					chain := b.chains[r.IntN(len(b.chains))]
					local := chain[:*prompt]
					if r.IntN(2) == 0 { // half the prompts diverge somewhere
						local = append([]uint64(nil), local...)
						local[r.IntN(len(local))] ^= 1
					}
					seq := blockhash.Sequence(nil, local)
					req := statestore.RouteRequest{Pool: b.pool, RequestID: fmt.Sprintf("c%d-%d-%d", clients, c, i), SeqHashes: seq,
						ISL: int64(len(seq) * b.blockSize), Random: r.Float64(), NowMs: time.Now().UnixMilli()}
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
			return err
		}
		slices.Sort(lat)
		q := func(p float64) float64 {
			if len(lat) == 0 {
				return 0
			}
			return float64(lat[int(p*float64(len(lat)-1))].Nanoseconds()) / 1e3
		}
		run := routeRun{Clients: clients, Decisions: len(lat), DecisionsPerS: float64(len(lat)) / el.Seconds(), P50us: q(0.50), P99us: q(0.99)}
		if rs != nil {
			// Only route.lua runs as EVALSHA during a run (stats reset before it).
			run.RedisUsPerCall, run.RedisCallsTotal = evalshaUs(ctx, rs)
		}
		runs = append(runs, run)
	}
	out := map[string]any{"bench": "route", "store": st.Name(), "workers": *workers, "indexed_blocks": *blocks,
		"prompt_blocks": *prompt, "predicted_ttl_ms": b.predictedTTLMs, "index_load_seconds": loadSecs, "runs": runs}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

// evalshaUs returns usec per EVALSHA call and the call count, summed over the nodes (INFO commandstats).
func evalshaUs(ctx context.Context, rs *statestore.Redis) (float64, float64) {
	calls, usec, err := rs.CommandStats(ctx, "evalsha")
	if err != nil || calls == 0 {
		return 0, 0
	}
	return usec / calls, calls
}
