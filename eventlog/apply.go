package eventlog

import (
	"context"
	"fmt"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/statestore"
)

// applyChunk bounds the events of one ApplyEvents call (count), as the live subscriber does.
const applyChunk = 4096

// Apply loads a log into st: it creates the pool if missing (block size blockSize; an existing pool
// must have that block size), registers every worker of the log with enough dp ranks, and applies the
// events in file order.
func Apply(ctx context.Context, st statestore.Store, pool string, blockSize int, l *Log) (statestore.ApplyResult, error) {
	var total statestore.ApplyResult
	if err := ingest.EnsurePool(ctx, st, pool, blockSize); err != nil {
		return total, err
	}
	now := time.Now().UnixMilli()
	dpSize := map[string]int{}
	var order []string
	for _, b := range l.Batches {
		if _, ok := dpSize[b.WorkerID]; !ok {
			order = append(order, b.WorkerID)
			dpSize[b.WorkerID] = 1
		}
		for _, ev := range b.Events {
			dpSize[b.WorkerID] = max(dpSize[b.WorkerID], ev.DPRank+1)
		}
	}
	for _, id := range order {
		if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: id, DPSize: dpSize[id]}, now); err != nil {
			return total, fmt.Errorf("register worker %q: %w", id, err)
		}
	}
	for _, b := range l.Batches {
		for i := 0; i < len(b.Events); i += applyChunk {
			chunk := b
			chunk.Pool, chunk.NowMs = pool, now
			chunk.Events = b.Events[i:min(i+applyChunk, len(b.Events))]
			res, err := st.ApplyEvents(ctx, chunk)
			total.Add(res)
			if err != nil {
				return total, fmt.Errorf("apply events of %q: %w", b.WorkerID, err)
			}
		}
	}
	return total, nil
}

// RankBlocks is one (worker, dp_rank)'s block count as the store reports it.
type RankBlocks struct {
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
	// Blocks counts the (block, tier-independent) entries the rank holds from events.
	Blocks int64 `json:"blocks"`
}

// StoreBlocks lists every registered (worker, dp_rank) of pool with its cached block count.
func StoreBlocks(ctx context.Context, st statestore.Store, pool string) ([]RankBlocks, error) {
	ws, err := st.Workers(ctx, pool, time.Now().UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("pool %q: workers: %w", pool, err)
	}
	var out []RankBlocks
	for _, w := range ws {
		for _, r := range w.Ranks {
			out = append(out, RankBlocks{WorkerID: w.WorkerID, DPRank: r.DPRank, Blocks: r.CachedBlocks})
		}
	}
	return out, nil
}
