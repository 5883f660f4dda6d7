package bench

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/sim"
	"github.com/kvrouter/kvrouter/simulation/traces"
	"github.com/kvrouter/kvrouter/statestore"
)

// indexOp is one step of the benchmark timeline: a lookup of a request's prompt, or the KV events one
// worker's engine model emitted for that request.
type indexOp struct {
	worker int
	lookup []uint64 // sequence hashes of the prompt; nil for an event op
	batch  statestore.EventBatch
	blocks int // stored blocks in batch
}

// IndexReport is what `kvrouter bench index` prints.
type IndexReport struct {
	Trace          string  `json:"trace"`
	Workers        int     `json:"workers"`
	EngineBlock    int     `json:"engine_block"`
	CapacityBlocks int     `json:"capacity_blocks"`
	Undeclared     bool    `json:"undeclared,omitempty"` // workers registered without total_kv_blocks
	Goroutines     int     `json:"goroutines"`
	Passes         int     `json:"passes"`
	Seconds        float64 `json:"seconds"`
	// CPUSeconds is the process's user+system CPU time over the measured passes (includes the lookup
	// timing and GC); on a shared, loaded machine block_ops_per_cpu_s is the steadier number.
	CPUSeconds      float64 `json:"cpu_seconds"`
	BlockOpsPerCPUS float64 `json:"block_ops_per_cpu_s"`
	BlockOpsPerS    float64 `json:"block_ops_per_s"`
	OpsPerS         float64 `json:"ops_per_s"`
	LookupP50us     float64 `json:"lookup_p50_us"`
	LookupP99us     float64 `json:"lookup_p99_us"`
	// LookupCPUP99us is the p99 of the lookups' thread CPU time (Linux): far below LookupP99us, the slow
	// lookups are ones the guest scheduler preempted, not ones that did more work. (In a VM, time the
	// host takes the vCPU away still counts as the thread's CPU time.)
	LookupCPUP99us   float64 `json:"lookup_cpu_p99_us"`
	Events           int     `json:"events"`
	Lookups          int     `json:"lookups"`
	QueryBlocks      int64   `json:"query_blocks"`
	StoredBlocks     int64   `json:"stored_blocks"`
	IndexBytes       int64   `json:"index_bytes"`
	CachedEntries    int64   `json:"cached_entries"`
	BytesPerEntry    float64 `json:"bytes_per_block_entry"`
	MeanOverlapRatio float64 `json:"mean_overlap_ratio"`
	// LookupsByBlocks splits the lookup latencies by prompt length, to tell long prompts from GC and
	// scheduling noise in the p99.
	LookupsByBlocks []LookupBucket `json:"lookups_by_blocks"`
	// GCCycles is how many garbage collections ran during the measured passes.
	GCCycles uint32 `json:"gc_cycles"`
}

// LookupBucket is the lookup latency of the prompts of [MinBlocks, MaxBlocks] blocks.
type LookupBucket struct {
	MinBlocks int     `json:"min_blocks"`
	MaxBlocks int     `json:"max_blocks"`
	Lookups   int     `json:"lookups"`
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	MaxUs     float64 `json:"max_us"`
	CPUP99us  float64 `json:"cpu_p99_us"` // p99 of the thread CPU time
}

// lookupBucketEdges are the prompt lengths (blocks) the lookup latencies are split at.
var lookupBucketEdges = []int{256, 1024, 4096}

// timedLookup is one lookup's latency, its thread CPU time and its prompt's length in blocks.
type timedLookup struct {
	d, cpu time.Duration
	blocks int
}

// cpuP99 returns the p99 of the lookups' CPU time, µs.
func cpuP99(lat []timedLookup) float64 {
	if len(lat) == 0 {
		return 0
	}
	cpu := make([]time.Duration, len(lat))
	for i, l := range lat {
		cpu[i] = l.cpu
	}
	sort.Slice(cpu, func(i, j int) bool { return cpu[i] < cpu[j] })
	return us(cpu[len(cpu)*99/100])
}

// lookupBuckets splits lat (sorted by latency) by prompt length.
func lookupBuckets(lat []timedLookup) []LookupBucket {
	var out []LookupBucket
	lo := 0
	for i := 0; i <= len(lookupBucketEdges); i++ {
		b := LookupBucket{MinBlocks: lo, MaxBlocks: -1} // -1: no upper bound
		if i < len(lookupBucketEdges) {
			b.MaxBlocks = lookupBucketEdges[i] - 1
		}
		var ds []time.Duration
		var in []timedLookup
		for _, l := range lat {
			if l.blocks >= lo && (b.MaxBlocks < 0 || l.blocks <= b.MaxBlocks) {
				ds = append(ds, l.d)
				in = append(in, l)
			}
		}
		b.CPUP99us = cpuP99(in)
		if n := len(ds); n > 0 {
			b.Lookups = n
			b.P50us = us(ds[n/2])
			b.P99us = us(ds[n*99/100])
			b.MaxUs = us(ds[n-1])
		}
		out = append(out, b)
		if i < len(lookupBucketEdges) {
			lo = lookupBucketEdges[i]
		}
	}
	return out
}

// IndexTimeline is a trace turned into the benchmark's operations (BuildIndexTimeline).
type IndexTimeline struct {
	ops                            []indexOp
	workers, engineBlock, capacity int
}

// IndexOptions configure RunIndex.
type IndexOptions struct {
	// Trace names the trace in the report.
	Trace string
	// Goroutines replay the timeline (worker w's ops on goroutine w mod G); 0 = GOMAXPROCS.
	Goroutines int
	// Duration: repeat the replay (a fresh index each pass) until this much time was measured; 0 = one pass.
	Duration time.Duration
	// Undeclared registers the workers without their KV capacity (total_kv_blocks 0), as a worker that
	// does not report it: the index then grows from empty instead of being sized on registration.
	Undeclared bool
}

// RunIndex replays the timeline on fresh embedded stores and measures block operations per second
// (lookup blocks + stored blocks, Dynamo's method), lookup latency and the index's memory per entry.
func RunIndex(ctx context.Context, tl *IndexTimeline, o IndexOptions) (IndexReport, error) {
	g := o.Goroutines
	if g <= 0 {
		g = runtime.GOMAXPROCS(0)
	}
	res := IndexReport{Trace: o.Trace, Workers: tl.workers, EngineBlock: tl.engineBlock, CapacityBlocks: tl.capacity, Goroutines: g, Undeclared: o.Undeclared}
	var lat []timedLookup
	var elapsed, cpu time.Duration
	var gc0 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	for pass := 0; pass == 0 || elapsed < o.Duration; pass++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		c0 := processCPU()
		declared := int64(tl.capacity)
		if o.Undeclared {
			declared = 0
		}
		r, l, d, err := runIndexPass(ctx, tl.ops, tl.workers, tl.engineBlock, g, declared, pass == 0)
		cpu += processCPU() - c0
		if err != nil {
			return res, err
		}
		if pass == 0 {
			res.IndexBytes, res.CachedEntries, res.MeanOverlapRatio = r.IndexBytes, r.CachedEntries, r.MeanOverlapRatio
		}
		res.Events += r.Events
		res.Lookups += r.Lookups
		res.QueryBlocks += r.QueryBlocks
		res.StoredBlocks += r.StoredBlocks
		lat = append(lat, l...)
		elapsed += d
		res.Passes++
	}
	var gc1 runtime.MemStats
	runtime.ReadMemStats(&gc1)
	res.GCCycles = gc1.NumGC - gc0.NumGC
	res.Seconds = elapsed.Seconds()
	res.CPUSeconds = cpu.Seconds()
	res.BlockOpsPerCPUS = float64(res.QueryBlocks+res.StoredBlocks) / res.CPUSeconds
	res.BlockOpsPerS = float64(res.QueryBlocks+res.StoredBlocks) / res.Seconds
	res.OpsPerS = float64(res.Lookups+res.Events) / res.Seconds
	sort.Slice(lat, func(i, j int) bool { return lat[i].d < lat[j].d })
	if n := len(lat); n > 0 {
		res.LookupP50us = us(lat[n/2].d)
		res.LookupP99us = us(lat[n*99/100].d)
	}
	res.LookupCPUP99us = cpuP99(lat)
	res.LookupsByBlocks = lookupBuckets(lat)
	if res.CachedEntries > 0 {
		res.BytesPerEntry = float64(res.IndexBytes) / float64(res.CachedEntries)
	}
	return res, nil
}

// sessionWorker partitions the trace by conversation: requests sharing their second block (the first is
// the shared system prompt) belong to one session and go to one worker.
func sessionWorker(r traces.Request, workers int) int {
	key := uint64(0)
	if len(r.HashIDs) > 1 {
		key = r.HashIDs[1]
	} else if len(r.HashIDs) == 1 {
		key = r.HashIDs[0]
	}
	return int((key * 0x9E3779B97F4A7C15 >> 32) % uint64(workers))
}

// BuildIndexTimeline runs each worker's requests through an engine block pool (prefix reuse, LRU
// eviction of unreferenced blocks) and interleaves, in arrival order, each request's lookup with the
// events its worker emitted for it.
func BuildIndexTimeline(reqs []traces.Request, workers, engineBlock, capacity int) (*IndexTimeline, error) {
	if engineBlock != 16 && engineBlock != 64 && engineBlock != 512 {
		return nil, fmt.Errorf("engine block must be 16, 64 or 512, got %d", engineBlock)
	}
	if workers <= 0 || workers > statestore.MaxWorkersPerPool || capacity <= 0 {
		return nil, fmt.Errorf("workers must be in [1, %d] and capacity > 0", statestore.MaxWorkersPerPool)
	}
	pools := make([]*engine.BlockPool, workers)
	var pending []engine.Event
	sink := func(e engine.Event) { pending = append(pending, e) }
	for w := range pools {
		pools[w] = engine.NewBlockPool(capacity, uint64(w)+1, sink)
	}
	eventIDs := make([]uint64, workers)
	ops := make([]indexOp, 0, 2*len(reqs))
	for _, r := range reqs {
		local, seq := traces.BlockHashes(r, engineBlock, "")
		w := sessionWorker(r, workers)
		ops = append(ops, indexOp{worker: w, lookup: seq})
		pending = pending[:0]
		if _, ok := pools[w].Acquire(seq, local); ok {
			pools[w].Release(seq)
		}
		if len(pending) == 0 {
			continue
		}
		op := indexOp{worker: w, batch: statestore.EventBatch{Pool: "bench", WorkerID: benchWorkerID(w)}}
		for _, e := range pending {
			eventIDs[w]++
			se := sim.EngineEvent(e)
			se.EventID, se.HasEventID = eventIDs[w], true
			switch e.Kind {
			case engine.EventStored:
				op.blocks += len(e.Blocks)
			case engine.EventRemoved:
			default:
				return nil, fmt.Errorf("bench index: unexpected engine event kind %d", e.Kind)
			}
			op.batch.Events = append(op.batch.Events, se)
		}
		ops = append(ops, op)
	}
	return &IndexTimeline{ops: ops, workers: workers, engineBlock: engineBlock, capacity: capacity}, nil
}

func benchWorkerID(w int) string { return fmt.Sprintf("w%03d", w) }

// runIndexPass replays the timeline on a fresh embedded store with g goroutines (worker w's ops run on
// goroutine w mod g, in order), timing each lookup.
func runIndexPass(ctx context.Context, ops []indexOp, workers, engineBlock, g int, declared int64, measureMemory bool) (IndexReport, []timedLookup, time.Duration, error) {
	var res IndexReport
	var before runtime.MemStats
	if measureMemory {
		runtime.GC()
		runtime.ReadMemStats(&before)
	}
	st := statestore.NewMemory()
	cfg := statestore.DefaultPoolConfig(engineBlock)
	if err := st.PutPool(ctx, "bench", cfg); err != nil {
		return res, nil, 0, err
	}
	for w := 0; w < workers; w++ {
		if err := st.PutWorker(ctx, "bench", statestore.WorkerSpec{WorkerID: benchWorkerID(w), TotalKVBlocks: declared}, 0); err != nil {
			return res, nil, 0, err
		}
	}
	type part struct {
		lat             []timedLookup
		lookups, events int
		qBlocks, sBlock int64
		overlap         float64
		err             error
	}
	parts := make([]part, g)
	var wg sync.WaitGroup
	start := time.Now()
	for gi := 0; gi < g; gi++ {
		wg.Add(1)
		go func(gi int) {
			defer wg.Done()
			runtime.LockOSThread() // threadCPU reads this thread's clock
			defer runtime.UnlockOSThread()
			p := &parts[gi]
			for i := range ops {
				op := &ops[i]
				if op.worker%g != gi {
					continue
				}
				if op.lookup != nil {
					c0 := threadCPU()
					t0 := time.Now()
					scores, err := st.Overlap(ctx, "bench", op.lookup, 0)
					d := time.Since(t0)
					p.lat = append(p.lat, timedLookup{d: d, cpu: threadCPU() - c0, blocks: len(op.lookup)})
					if err != nil {
						p.err = err
						return
					}
					best := 0
					for _, s := range scores {
						best = max(best, s.Blocks)
					}
					if len(op.lookup) > 0 {
						p.overlap += float64(best) / float64(len(op.lookup))
					}
					p.lookups++
					p.qBlocks += int64(len(op.lookup))
					continue
				}
				if _, err := st.ApplyEvents(ctx, op.batch); err != nil {
					p.err = err
					return
				}
				p.events += len(op.batch.Events)
				p.sBlock += int64(op.blocks)
			}
		}(gi)
	}
	wg.Wait()
	elapsed := time.Since(start)
	var lat []timedLookup
	overlap := 0.0
	for _, p := range parts {
		if p.err != nil {
			return res, nil, 0, p.err
		}
		lat = append(lat, p.lat...)
		res.Lookups += p.lookups
		res.Events += p.events
		res.QueryBlocks += p.qBlocks
		res.StoredBlocks += p.sBlock
		overlap += p.overlap
	}
	if res.Lookups > 0 {
		res.MeanOverlapRatio = overlap / float64(res.Lookups)
	}
	if measureMemory {
		ws, err := st.Workers(ctx, "bench", 0)
		if err != nil {
			return res, nil, 0, err
		}
		for _, w := range ws {
			for _, r := range w.Ranks {
				res.CachedEntries += r.CachedBlocks
			}
		}
		var after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&after)
		res.IndexBytes = int64(after.HeapAlloc) - int64(before.HeapAlloc) - int64(cap(lat))*int64(unsafe.Sizeof(timedLookup{}))
		runtime.KeepAlive(st)
	}
	return res, lat, elapsed, nil
}

// processCPU returns the process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
