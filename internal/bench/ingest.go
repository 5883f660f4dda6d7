package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// IngestOptions configure RunIngest.
type IngestOptions struct {
	// Workers in the pool; Blocks (block, worker) entries to ingest as Stored events of Chain blocks,
	// each chain on Replicas workers; Clients concurrent writers.
	Workers, Blocks, Chain, Replicas, Clients int
	// Repeat is the number of runs, each into a fresh namespace (median, min, max reported). Default 3.
	Repeat int
	// Log receives a text summary (nil = none).
	Log io.Writer
}

// IngestRun is one run's measurements; server figures are INFO deltas over the load only.
type IngestRun struct {
	Repeat        int     `json:"repeat"`
	BlocksApplied int64   `json:"blocks_applied"`
	Seconds       float64 `json:"seconds"`
	BlocksPerS    float64 `json:"blocks_per_s"`
	// MemoryBytes is the growth of Redis used_memory (a Redis store) or of the live Go heap after a GC
	// (the embedded one); BytesPerEntry divides it by the entries stored.
	MemoryBytes   float64 `json:"memory_bytes"`
	BytesPerEntry float64 `json:"bytes_per_entry"`
	// RedisCPUus is Redis CPU (used_cpu_user+sys delta, all nodes) per stored block; BlocksPerCoreS its
	// inverse; CommandUs the commandstats time per block (secondary).
	RedisCPUus     float64                    `json:"redis_cpu_us_per_block,omitempty"`
	BlocksPerCoreS float64                    `json:"blocks_per_redis_core_s,omitempty"`
	CommandUs      float64                    `json:"command_us_per_block,omitempty"`
	Slowlog        *statestore.SlowlogSummary `json:"slowlog,omitempty"`
	LoadBefore     LoadAvg                    `json:"loadavg_before"`
	LoadAfter      LoadAvg                    `json:"loadavg_after"`
}

// IngestSummary is median/min/max over the runs.
type IngestSummary struct {
	BlocksPerS     Summary `json:"blocks_per_s"`
	BytesPerEntry  Summary `json:"bytes_per_entry"`
	RedisCPUus     Summary `json:"redis_cpu_us_per_block"`
	BlocksPerCoreS Summary `json:"blocks_per_redis_core_s"`
	CommandUs      Summary `json:"command_us_per_block"`
	Load           Summary `json:"loadavg_1m"`
}

// IngestReport is what `kvrouter bench ingest` prints.
type IngestReport struct {
	Bench       string        `json:"bench"`
	Store       string        `json:"store"`
	Workers     int           `json:"workers"`
	ChainBlocks int           `json:"chain_blocks"`
	Replicas    int           `json:"replicas"`
	Clients     int           `json:"clients"`
	Repeat      int           `json:"repeat"`
	Runs        []IngestRun   `json:"runs"`
	Summary     IngestSummary `json:"summary"`
}

// RunIngest loads a synthetic index Repeat times, each into a store open returns (a fresh namespace,
// dropped after the run; the store is closed), and measures blocks/s, server CPU per block and the
// memory each (block, worker) entry costs.
func RunIngest(ctx context.Context, open func() (statestore.Store, error), o IngestOptions) (IngestReport, error) {
	if o.Repeat == 0 {
		o.Repeat = 3
	}
	rep := IngestReport{Bench: "ingest", Workers: o.Workers, ChainBlocks: o.Chain, Replicas: o.Replicas, Clients: o.Clients, Repeat: o.Repeat}
	if o.Workers <= 0 || o.Blocks <= 0 || o.Chain <= 0 || o.Replicas <= 0 || o.Clients <= 0 || o.Repeat < 0 {
		return rep, errors.New("workers, blocks, chain, replicas, clients and repeat must be > 0")
	}
	b := NewSyntheticIndex(o.Workers, o.Blocks, o.Chain, o.Replicas)
	var err error
	rep.Runs, rep.Store, err = freshRuns(ctx, open, o.Repeat, func(st statestore.Store, repeat int) (IngestRun, error) {
		run, err := ingestRun(ctx, st, b, o.Clients)
		run.Repeat = repeat
		return run, err
	})
	if err != nil {
		return rep, err
	}
	col := func(f func(IngestRun) float64) Summary {
		var xs []float64
		for _, r := range rep.Runs {
			xs = append(xs, f(r))
		}
		return Summarize(xs)
	}
	rep.Summary = IngestSummary{
		BlocksPerS:     col(func(r IngestRun) float64 { return r.BlocksPerS }),
		BytesPerEntry:  col(func(r IngestRun) float64 { return r.BytesPerEntry }),
		RedisCPUus:     col(func(r IngestRun) float64 { return r.RedisCPUus }),
		BlocksPerCoreS: col(func(r IngestRun) float64 { return r.BlocksPerCoreS }),
		CommandUs:      col(func(r IngestRun) float64 { return r.CommandUs }),
	}
	var loads []float64
	for _, r := range rep.Runs {
		loads = append(loads, r.LoadBefore[0], r.LoadAfter[0])
	}
	rep.Summary.Load = Summarize(loads)
	if o.Log != nil {
		s := rep.Summary
		fmt.Fprintf(o.Log, "bench ingest %s: %d workers, %d-block events, %d writers; median [min–max] of %d runs\n", rep.Store, o.Workers, o.Chain, o.Clients, o.Repeat)
		writeTable(o.Log, []string{"blocks/s", "bytes/entry", "Redis CPU µs/block", "blocks/Redis core-s", "cmd µs/block", "load 1m"},
			[][]string{{fmtSummary(s.BlocksPerS, 0), fmtSummary(s.BytesPerEntry, 1), fmtSummary(s.RedisCPUus, 2),
				fmtSummary(s.BlocksPerCoreS, 0), fmtSummary(s.CommandUs, 2), fmtSummary(s.Load, 2)}})
	}
	return rep, nil
}

// ingestRun sets up the pool and loads the index once into st.
func ingestRun(ctx context.Context, st statestore.Store, b *SyntheticIndex, clients int) (IngestRun, error) {
	var run IngestRun
	if err := b.Setup(ctx, st); err != nil {
		return run, err
	}
	before := goHeap(st)
	ph, err := startPhase(ctx, st)
	if err != nil {
		return run, err
	}
	start := time.Now()
	n, err := b.Load(ctx, st, clients)
	if err != nil {
		return run, err
	}
	el := time.Since(start)
	d, slow, server, err := ph.end(ctx)
	if err != nil {
		return run, err
	}
	run.LoadBefore, run.LoadAfter = ph.load, ReadLoadAvg()
	run.BlocksApplied, run.Seconds, run.BlocksPerS = n, el.Seconds(), float64(n)/el.Seconds()
	if server {
		run.MemoryBytes = d.UsedMemory
		run.RedisCPUus = d.CPUSeconds * 1e6 / float64(max(n, 1))
		if run.RedisCPUus > 0 {
			run.BlocksPerCoreS = 1e6 / run.RedisCPUus
		}
		run.CommandUs = d.CommandUsec / float64(max(n, 1))
		run.Slowlog = &slow
	} else {
		run.MemoryBytes = goHeap(st) - before
	}
	run.BytesPerEntry = run.MemoryBytes / float64(max(n, 1))
	return run, nil
}

// goHeap is this process's live heap after a GC, bytes (0 for a server store, whose memory is counted
// by the server). Two collections: objects in sync.Pool caches survive the first one (as the pools'
// victim caches) and are freed by the second, so one GC before the load and one after would count pool
// contents that happened to be dropped in between (seen: a 1,024-block load "shrinking" the heap by 1.3 MB).
func goHeap(st statestore.Store) float64 {
	if _, ok := st.(serverStats); ok {
		return 0
	}
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}
