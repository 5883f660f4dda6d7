package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["ingest"] = command{name: "ingest", summary: "KV event ingest: blocks/s applied and memory bytes per (block, worker) entry", run: runBenchIngest}
}

// benchIndex describes the synthetic index the route and ingest benchmarks build: chains of chainLen
// blocks with random local hashes, each stored on `replicas` workers (round robin).
type benchIndex struct {
	pool      string
	workers   int
	blocks    int // total (block, worker) entries
	chainLen  int
	replicas  int
	blockSize int
	chains    [][]uint64 // local hashes
	// predictedTTLMs is the pool's predicted_ttl (predict-on-route: every decision books soft entries).
	predictedTTLMs int64
}

func (b *benchIndex) workerID(i int) string { return fmt.Sprintf("w%03d", i) }

func newBenchIndex(workers, blocks, chainLen, replicas int) *benchIndex {
	b := &benchIndex{pool: "bench", workers: workers, blocks: blocks, chainLen: chainLen, replicas: replicas, blockSize: 16}
	r := rand.New(rand.NewPCG(7, 7))
	n := blocks / (chainLen * replicas)
	for i := 0; i < n; i++ {
		c := make([]uint64, chainLen)
		for j := range c {
			c[j] = r.Uint64()
		}
		b.chains = append(b.chains, c)
	}
	return b
}

func (b *benchIndex) setup(ctx context.Context, st statestore.Store) error {
	cfg := statestore.DefaultPoolConfig(b.blockSize)
	cfg.PredictedTTLMs = b.predictedTTLMs
	if err := st.PutPool(ctx, b.pool, cfg); err != nil {
		return err
	}
	for i := 0; i < b.workers; i++ {
		if err := st.PutWorker(ctx, b.pool, statestore.WorkerSpec{WorkerID: b.workerID(i), URL: "http://" + b.workerID(i)}, 0); err != nil {
			return err
		}
	}
	return nil
}

// load applies every chain as Stored events (16 chains per batch) with `clients` concurrent writers, one
// writer per worker subset so each worker's events stay in order. It returns the blocks applied.
func (b *benchIndex) load(ctx context.Context, st statestore.Store, clients int) (int64, error) {
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
					res, err := st.ApplyEvents(ctx, statestore.EventBatch{Pool: b.pool, WorkerID: b.workerID(w), Events: evs})
					applied.Add(int64(res.StoredBlocks))
					evs = evs[:0]
					return err
				}
				for i, chain := range b.chains {
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

func heapBytes() float64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

func runBenchIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("bench ingest", "bench ingest [--store memory|redis://…] [--workers N] [--blocks M] [--chain L] [--replicas R] [--clients C]")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 16, "workers in the pool")
	blocks := fs.Int("blocks", 1000000, "(block, worker) entries to ingest")
	chain := fs.Int("chain", 64, "blocks per Stored event (one prompt's chain)")
	replicas := fs.Int("replicas", 1, "workers holding each chain")
	clients := fs.Int("clients", 8, "concurrent ingest writers")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := openStore(*storeURL, storeOptions{fresh: true})
	if err != nil {
		return err
	}
	defer st.Close()
	b := newBenchIndex(*workers, *blocks, *chain, *replicas)
	if err := b.setup(ctx, st); err != nil {
		return err
	}
	rs, _ := st.(*statestore.Redis)
	memBefore := 0.0
	if rs != nil {
		memBefore, _ = rs.InfoField(ctx, "memory", "used_memory")
	} else {
		memBefore = heapBytes()
	}
	start := time.Now()
	n, err := b.load(ctx, st, *clients)
	if err != nil {
		return err
	}
	el := time.Since(start)
	memAfter := 0.0
	if rs != nil {
		memAfter, _ = rs.InfoField(ctx, "memory", "used_memory")
	} else {
		memAfter = heapBytes()
	}
	out := map[string]any{
		"bench": "ingest", "store": st.Name(), "workers": *workers, "chain_blocks": *chain, "replicas": *replicas,
		"clients": *clients, "blocks_applied": n, "seconds": el.Seconds(), "blocks_per_s": float64(n) / el.Seconds(),
		"memory_bytes": memAfter - memBefore, "bytes_per_entry": (memAfter - memBefore) / float64(max(n, 1)),
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
