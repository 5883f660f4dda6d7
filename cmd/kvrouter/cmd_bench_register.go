package main

import (
	"context"
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	benchCommands["register"] = command{name: "register", summary: "registering workers one by one: time and Redis CPU per registration, per slice (linear vs quadratic)", run: runBenchRegister}
}

func runBenchRegister(ctx context.Context, args []string) error {
	fs := newFlagSet("bench register", "bench register [--store memory|redis://…] [--workers N] [--slice S] [--repeat N]\n\n"+
		"Registers --workers workers one by one into an empty pool (a fresh key namespace, deleted after) and reports\n"+
		"time and Redis CPU per registration for each slice of --slice workers; JSON on stdout, a table on stderr.")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 4096, "workers to register")
	slice := fs.Int("slice", 512, "registrations per measured slice")
	repeat := fs.Int("repeat", 3, "runs (median, min, max reported)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *workers < 1 || *slice < 1 || *repeat < 1 {
		return fmt.Errorf("--workers, --slice and --repeat must be >= 1")
	}
	open := func() (statestore.Store, error) { return openStore(*storeURL, storeOptions{fresh: true}) }
	rep, err := bench.RunRegister(ctx, open, bench.RegisterOptions{Workers: *workers, Slice: *slice, Repeat: *repeat, Log: os.Stderr})
	if err != nil {
		return err
	}
	return printJSON(rep)
}
