package bench

import (
	"context"
	"runtime"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// IngestOptions configure RunIngest.
type IngestOptions struct {
	// Workers in the pool; Blocks (block, worker) entries to ingest as Stored events of Chain blocks,
	// each chain on Replicas workers; Clients concurrent writers.
	Workers, Blocks, Chain, Replicas, Clients int
}

// IngestReport is what `kvrouter bench ingest` prints.
type IngestReport struct {
	Bench         string  `json:"bench"`
	Store         string  `json:"store"`
	Workers       int     `json:"workers"`
	ChainBlocks   int     `json:"chain_blocks"`
	Replicas      int     `json:"replicas"`
	Clients       int     `json:"clients"`
	BlocksApplied int64   `json:"blocks_applied"`
	Seconds       float64 `json:"seconds"`
	BlocksPerS    float64 `json:"blocks_per_s"`
	MemoryBytes   float64 `json:"memory_bytes"`
	BytesPerEntry float64 `json:"bytes_per_entry"`
}

// RunIngest loads a synthetic index into st and measures blocks/s and the memory each (block, worker)
// entry costs: Redis used_memory for a Redis store, the Go heap for the embedded one.
func RunIngest(ctx context.Context, st statestore.Store, o IngestOptions) (IngestReport, error) {
	rep := IngestReport{Bench: "ingest", Store: st.Name(), Workers: o.Workers, ChainBlocks: o.Chain, Replicas: o.Replicas, Clients: o.Clients}
	b := NewSyntheticIndex(o.Workers, o.Blocks, o.Chain, o.Replicas)
	if err := b.Setup(ctx, st); err != nil {
		return rep, err
	}
	before := storeMemory(ctx, st)
	start := time.Now()
	n, err := b.Load(ctx, st, o.Clients)
	if err != nil {
		return rep, err
	}
	el := time.Since(start)
	rep.BlocksApplied, rep.Seconds, rep.BlocksPerS = n, el.Seconds(), float64(n)/el.Seconds()
	rep.MemoryBytes = storeMemory(ctx, st) - before
	rep.BytesPerEntry = rep.MemoryBytes / float64(max(n, 1))
	return rep, nil
}

// storeMemory is Redis' used_memory for a Redis store, else this process's live heap after a GC, bytes.
func storeMemory(ctx context.Context, st statestore.Store) float64 {
	if rs, ok := st.(*statestore.Redis); ok {
		v, _ := rs.InfoField(ctx, "memory", "used_memory")
		return v
	}
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
