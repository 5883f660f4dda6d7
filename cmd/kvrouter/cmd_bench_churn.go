package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["churn"] = command{name: "churn", summary: "roster changes at fleet scale: removal, registration and the decisions after each, time per call and SLOWLOG", run: runBenchChurn}
}

func runBenchChurn(ctx context.Context, args []string) error {
	fs := newFlagSet("bench churn", "bench churn [--store memory|redis://…] [--workers N] [--blocks M] [--prompt B] [--sharing K]\n"+
		"                   [--cycles C] [--between D] [--warm W] [--ops FILE] [--slowlog-us US] [--prefix P]\n\n"+
		"Builds (or, under --prefix, reuses) the route benchmark's index, makes --warm decisions, then --cycles times:\n"+
		"removes a worker, makes --between decisions (route + done), registers it again, makes --between decisions.\n"+
		"Reports client time per kind of call and the SLOWLOG of every call after the index load (warm-up included);\n"+
		"--ops writes the calls in order, one label per line, for per-call profilers (scripts/roster-percall.sh).\n"+
		"JSON on stdout, a table on stderr.")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 4096, "workers in the index")
	blocks := fs.Int("blocks", 1000000, "indexed (block, worker) entries")
	prompt := fs.Int("prompt", 64, "blocks per prompt")
	sharing := fs.Int("sharing", bench.DefaultSharing, "workers holding each indexed chain")
	cycles := fs.Int("cycles", 8, "removal + registration cycles")
	between := fs.Int("between", 3, "decisions after each removal and each registration")
	warm := fs.Int("warm", 50, "decisions before the first change (timed as route-first, route-warm-up)")
	opsPath := fs.String("ops", "", "write every call's label here, in order, one per line")
	slowlogUs := fs.Int64("slowlog-us", 0, "set slowlog-log-slower-than to this many µs for the run and restore it after; 0 = leave it")
	prefix := fs.String("prefix", "", "Redis key prefix holding the index (built when missing, never deleted); empty = a fresh namespace, deleted after")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o := bench.ChurnOptions{Workers: *workers, Blocks: *blocks, Prompt: *prompt, Sharing: *sharing, Cycles: *cycles,
		Between: *between, Warm: *warm, Keep: *prefix != "", Log: os.Stderr}
	if *opsPath != "" {
		f, err := os.Create(*opsPath)
		if err != nil {
			return fmt.Errorf("--ops: %w", err)
		}
		defer f.Close()
		o.Ops = f
	}
	if *slowlogUs > 0 {
		restore, err := setSlowlog(ctx, *storeURL, *slowlogUs)
		if err != nil {
			return err
		}
		defer restore()
	}
	st, err := openStore(*storeURL, storeOptions{fresh: *prefix == "", prefix: *prefix})
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := bench.RunChurn(ctx, st, o)
	if err != nil {
		return err
	}
	return printJSON(rep)
}
