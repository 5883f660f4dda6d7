package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// SyntheticIndex is the synthetic index the route and ingest benchmarks build: chains of chainLen
// blocks with random local hashes, each stored on `replicas` workers (round robin).
type SyntheticIndex struct {
	// Pool is "bench"; BlockSize 16 tokens.
	Pool      string
	BlockSize int
	workers   int
	blocks    int // total (block, worker) entries
	chainLen  int
	replicas  int
	// Chains are the prompts' local hashes, chainLen each.
	Chains [][]uint64
	// PredictedTTLMs is the pool's predicted_ttl (predict-on-route: every decision books soft entries).
	PredictedTTLMs int64
}

// WorkerID names worker i.
func (b *SyntheticIndex) WorkerID(i int) string { return fmt.Sprintf("w%03d", i) }

// NewSyntheticIndex draws blocks/(chainLen·replicas) chains of random local hashes (seeded: the same
// index every run).
func NewSyntheticIndex(workers, blocks, chainLen, replicas int) *SyntheticIndex {
	b := &SyntheticIndex{Pool: "bench", workers: workers, blocks: blocks, chainLen: chainLen, replicas: replicas, BlockSize: 16}
	r := rand.New(rand.NewPCG(7, 7))
	n := blocks / (chainLen * replicas)
	for i := 0; i < n; i++ {
		c := make([]uint64, chainLen)
		for j := range c {
			c[j] = r.Uint64()
		}
		b.Chains = append(b.Chains, c)
	}
	return b
}

// Setup creates the pool (replacing its config) and registers the workers.
func (b *SyntheticIndex) Setup(ctx context.Context, st statestore.Store) error {
	cfg := statestore.DefaultPoolConfig(b.BlockSize)
	cfg.PredictedTTLMs = b.PredictedTTLMs
	if err := st.PutPool(ctx, b.Pool, cfg); err != nil {
		return err
	}
	for i := 0; i < b.workers; i++ {
		if err := st.PutWorker(ctx, b.Pool, statestore.WorkerSpec{WorkerID: b.WorkerID(i), URL: "http://" + b.WorkerID(i)}, 0); err != nil {
			return err
		}
	}
	return nil
}

// Load applies every chain as Stored events (16 chains per batch) with `clients` concurrent writers, one
// writer per worker subset so each worker's events stay in order. It returns the blocks applied.
func (b *SyntheticIndex) Load(ctx context.Context, st statestore.Store, clients int) (int64, error) {
	var applied atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, clients)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for w := c; w < b.workers; w += clients {
				var evs []statestore.Event
				id := uint64(0)
				flush := func() error {
					if len(evs) == 0 {
						return nil
					}
					res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: b.Pool, WorkerID: b.WorkerID(w), Events: evs})
					applied.Add(int64(res.StoredBlocks))
					evs = evs[:0]
					return err
				}
				for i, chain := range b.Chains {
					for rep := 0; rep < b.replicas; rep++ {
						if (i+rep*(b.workers/max(b.replicas, 1)+1))%b.workers != w {
							continue
						}
						id++
						ev := statestore.Event{Kind: statestore.EventStored, HasEventID: true, EventID: id}
						seq := blockhash.Sequence(nil, chain)
						for j, l := range chain {
							ev.Blocks = append(ev.Blocks, statestore.StoredBlock{EngineHash: seq[j] ^ uint64(w+1)<<48, LocalHash: l})
						}
						evs = append(evs, ev)
						if len(evs) == 16 {
							if err := flush(); err != nil {
								errc <- err
								return
							}
						}
					}
				}
				if err := flush(); err != nil {
					errc <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		return applied.Load(), err
	}
	return applied.Load(), nil
}
