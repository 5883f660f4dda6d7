package main

import (
	"context"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["ingest"] = command{name: "ingest", summary: "KV event ingest: blocks/s applied and memory bytes per (block, worker) entry", run: runBenchIngest}
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
	rep, err := bench.RunIngest(ctx, st, bench.IngestOptions{Workers: *workers, Blocks: *blocks, Chain: *chain, Replicas: *replicas, Clients: *clients})
	if err != nil {
		return err
	}
	return printJSON(rep)
}
