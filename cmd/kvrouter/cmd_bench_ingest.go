package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["ingest"] = command{name: "ingest", summary: "KV event ingest: blocks/s, Redis CPU per block, memory bytes per (block, worker) entry", run: runBenchIngest}
}

func runBenchIngest(ctx context.Context, args []string) error {
	fs := newFlagSet("bench ingest", "bench ingest [--store memory|redis://…] [--workers N] [--blocks M] [--chain L] [--replicas R] [--clients C] [--repeat N]\n\n"+
		"Each repeat loads the index into a fresh key namespace, measures INFO deltas over the load only, and\n"+
		"deletes the namespace after; JSON on stdout, a text summary on stderr.")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 16, "workers in the pool")
	blocks := fs.Int("blocks", 1000000, "(block, worker) entries to ingest")
	chain := fs.Int("chain", 64, "blocks per Stored event (one prompt's chain)")
	replicas := fs.Int("replicas", 1, "workers holding each chain")
	clients := fs.Int("clients", 8, "concurrent ingest writers")
	repeat := fs.Int("repeat", 3, "runs (median, min, max reported)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *repeat < 1 {
		return fmt.Errorf("--repeat must be >= 1")
	}
	open := func() (statestore.Store, error) { return openStore(*storeURL, storeOptions{fresh: true}) }
	rep, err := bench.RunIngest(ctx, open, bench.IngestOptions{Workers: *workers, Blocks: *blocks, Chain: *chain, Replicas: *replicas,
		Clients: *clients, Repeat: *repeat, Log: os.Stderr})
	if err != nil {
		return err
	}
	return printJSON(rep)
}
