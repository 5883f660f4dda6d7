package main

import (
	"context"
	"os"
	"runtime/pprof"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/simulation/traces"
)

func init() {
	benchCommands["index"] = command{name: "index", summary: "embedded index throughput on a real trace (Dynamo's block-ops method)", run: runBenchIndex}
}

func runBenchIndex(ctx context.Context, args []string) error {
	fs := newFlagSet("bench index", "bench index [--trace FILE] [--workers 16] [--engine-block 16|64|512] [--capacity-blocks N] [--goroutines G] [--duration D]")
	tracePath := fs.String("trace", traces.MooncakeConversation, "Mooncake JSONL trace: a file (.jsonl or .jsonl.gz) or "+traces.MooncakeConversation+" (embedded)")
	workers := fs.Int("workers", 16, "number of simulated workers the trace's sessions are partitioned over")
	engineBlock := fs.Int("engine-block", 16, "engine KV block size in tokens: 16, 64 or 512 (trace blocks of 512 are split)")
	capTokens := fs.Int("capacity-tokens", 1<<20, "KV cache capacity of each simulated worker, tokens (used when --capacity-blocks is 0)")
	capBlocks := fs.Int("capacity-blocks", 0, "KV cache capacity of each simulated worker, blocks (0: --capacity-tokens / --engine-block)")
	goroutines := fs.Int("goroutines", 1, "replay goroutines (0 = GOMAXPROCS); workers are partitioned over them")
	duration := fs.Duration("duration", 0, "repeat the replay (fresh index each pass) until this much time was measured; 0 = one pass")
	limit := fs.Int("requests", 0, "use only the first N requests of the trace (0 = all)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the measured passes to this file")
	undeclared := fs.Bool("undeclared", false, "register the workers without total_kv_blocks (the index grows from empty instead of being sized on registration)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	capacity := *capBlocks
	if capacity == 0 {
		capacity = *capTokens / max(*engineBlock, 1)
	}
	reqs, err := traces.LoadMooncakeFile(*tracePath)
	if err != nil {
		return err
	}
	if *limit > 0 && *limit < len(reqs) {
		reqs = reqs[:*limit]
	}
	tl, err := bench.BuildIndexTimeline(reqs, *workers, *engineBlock, capacity)
	if err != nil {
		return err
	}
	if *cpuProfile != "" { // the measured passes only, not the timeline build
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	res, err := bench.RunIndex(ctx, tl, bench.IndexOptions{Trace: *tracePath, Goroutines: *goroutines, Duration: *duration, Undeclared: *undeclared})
	if err != nil {
		return err
	}
	return printJSON(res)
}
