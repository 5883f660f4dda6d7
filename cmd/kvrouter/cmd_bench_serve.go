package main

import (
	"context"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["serve"] = command{name: "serve", summary: "HTTP load on `kvrouter serve` over loopback: decisions/s, p50/p99 µs per route call", run: runBenchServe}
}

func runBenchServe(ctx context.Context, args []string) error {
	fs := newFlagSet("bench serve", "bench serve [--url http://host:port | --store memory|redis://…] [--workers N] [--prompt T] [--clients 1,8,32] [--duration D]\n\nWithout --url it starts `kvrouter serve` (this binary) on a free loopback port with --store.")
	url := fs.String("url", "", "an already running server; empty = start one")
	storeURL := storeFlag(fs)
	workers := fs.Int("workers", 64, "workers to register")
	prefixes := fs.Int("prefixes", 256, "cached prefixes, spread over the workers by KV events")
	prompt := fs.Int("prompt", 1024, "prompt length in tokens (token_ids, hashed by the server)")
	blockSize := fs.Int("block-size", 16, "pool block size")
	clientsFlag := fs.String("clients", "1,8,32", "comma-separated concurrent client counts, one run each")
	duration := fs.Duration("duration", 5*time.Second, "length of each run")
	hashes := fs.Bool("local-hashes", false, "send local_hashes (hashed by this client) instead of token_ids")
	noDone := fs.Bool("no-done", false, "do not end each request with POST …/done (leases then pile up until lease_ttl)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	clientCounts, err := parseCounts("clients", *clientsFlag)
	if err != nil {
		return err
	}
	o := bench.ServeOptions{URL: *url, Store: *storeURL, Workers: *workers, Prefixes: *prefixes, PromptTokens: *prompt,
		BlockSize: *blockSize, Clients: clientCounts, Duration: *duration, LocalHashes: *hashes, NoDone: *noDone}
	if o.URL == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		child, url, err := bench.StartServe(exe, bench.CleanEnv(), time.Minute, "--store", *storeURL, "--log-level", "info")
		if err != nil {
			return err
		}
		defer child.Stop(30 * time.Second)
		o.URL = url
	} else {
		o.Store = "(external)"
	}
	rep, err := bench.RunServe(ctx, o)
	if err != nil {
		return err
	}
	return printJSON(rep)
}
