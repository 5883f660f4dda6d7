package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/eventlog"
	"github.com/kvrouter/kvrouter/statestore"
)

// indexCommands are the `kvrouter index <tool>` subcommands.
var indexCommands = map[string]command{
	"apply": {name: "apply", summary: "load an event log into an embedded store; print per-worker block counts (and --query answers)", run: runIndexApply},
	"stats": {name: "stats", summary: "per-worker block counts and block-depth histograms of an event log", run: runIndexStats},
}

func init() {
	register(command{name: "index", summary: "offline tools over a KV event log (RouterEvent JSON lines or captured vLLM msgpack): apply, --query, stats", run: runIndex})
}

func runIndex(ctx context.Context, args []string) error {
	return runSubcommand(ctx, "index", "tool", indexCommands, args)
}

const indexLogHelp = "\n\nFILE holds JSON lines: RouterEvents (the body of POST /v1/events) and/or captured vLLM ZMQ messages\n" +
	"{\"worker_id\":\"w1\",\"dp_rank\":0,\"seq\":N,\"payload\":\"<base64 msgpack EventBatch>\"} (docs/API.md, \"Event logs\"); '-' reads standard input."

// readEventLog parses the log named by the only positional argument of fs.
func readEventLog(fs *flag.FlagSet, pool string, blockSize int) (*eventlog.Log, error) {
	if fs.NArg() != 1 {
		fs.Usage()
		return nil, errUsage
	}
	if err := statestore.CheckID("--pool", pool); err != nil {
		return nil, err
	}
	in := os.Stdin
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, fmt.Errorf("open event log: %w", err)
		}
		defer f.Close()
		in = f
	}
	l, err := eventlog.Read(in, pool, blockSize)
	if err != nil {
		return nil, fmt.Errorf("event log %s: %w", fs.Arg(0), err)
	}
	return l, nil
}

func runIndexApply(ctx context.Context, args []string) error {
	fs := newFlagSet("index apply", "index apply FILE [--block-size N] [--pool P] [--query 1,2,3,... | --query-hashes H1,H2,...]"+indexLogHelp)
	blockSize := fs.Int("block-size", 16, "KV block size of the pool, tokens (hashes token ids of events that declare none)")
	pool := fs.String("pool", core.DefaultPool, "pool the events are applied to")
	query := fs.String("query", "", "comma-separated token ids: print each worker's overlap (matched prefix blocks) after loading")
	queryHashes := fs.String("query-hashes", "", "comma-separated local block hashes (as `kvrouter hash` prints): like --query")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *blockSize < 1 {
		return fmt.Errorf("--block-size must be > 0, got %d", *blockSize)
	}
	if *query != "" && *queryHashes != "" {
		return fmt.Errorf("--query and --query-hashes exclude each other")
	}
	var local []uint64
	switch {
	case *query != "":
		tokens, err := parseTokens(*query)
		if err != nil {
			return fmt.Errorf("--query: %v", err)
		}
		if local = eventlog.LocalHashes(tokens, *blockSize); len(local) == 0 {
			return fmt.Errorf("--query: %d tokens make no full block of %d", len(tokens), *blockSize)
		}
	case *queryHashes != "":
		var err error
		if local, err = parseUints(*queryHashes, 64); err != nil {
			return fmt.Errorf("--query-hashes: %v", err)
		}
	}
	l, err := readEventLog(fs, *pool, *blockSize)
	if err != nil {
		return err
	}
	st := statestore.NewMemory()
	res, err := eventlog.Apply(ctx, st, *pool, *blockSize, l)
	if err != nil {
		return err
	}
	blocks, err := eventlog.StoreBlocks(ctx, st, *pool)
	if err != nil {
		return err
	}
	out := struct {
		Pool    string                 `json:"pool"`
		Events  int                    `json:"events"`
		Skipped []string               `json:"skipped,omitempty"`
		Result  statestore.ApplyResult `json:"result"`
		Workers []eventlog.RankBlocks  `json:"workers"`
		Query   *[]statestore.Score    `json:"overlap,omitempty"`
	}{Pool: *pool, Events: l.Events, Skipped: l.Skipped, Result: res, Workers: blocks}
	if local != nil {
		scores, err := eventlog.Query(ctx, st, *pool, local)
		if err != nil {
			return err
		}
		if scores == nil {
			scores = []statestore.Score{}
		}
		out.Query = &scores
	}
	return printJSON(out)
}

func runIndexStats(_ context.Context, args []string) error {
	fs := newFlagSet("index stats", "index stats FILE [--block-size N]"+indexLogHelp)
	blockSize := fs.Int("block-size", 16, "KV block size of the pool, tokens (events declaring another are dropped, as the store does)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *blockSize < 1 {
		return fmt.Errorf("--block-size must be > 0, got %d", *blockSize)
	}
	l, err := readEventLog(fs, core.DefaultPool, *blockSize)
	if err != nil {
		return err
	}
	return printJSON(struct {
		Events  int                  `json:"events"`
		Skipped []string             `json:"skipped,omitempty"`
		Workers []eventlog.RankStats `json:"workers"`
	}{l.Events, l.Skipped, eventlog.Stats(l, *blockSize)})
}

// parseUints parses a comma- or space-separated list of unsigned integers of the given bit size.
func parseUints(s string, bitSize int) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		v, err := strconv.ParseUint(f, 10, bitSize)
		if err != nil {
			return nil, fmt.Errorf("%q is not a u%d", f, bitSize)
		}
		out = append(out, v)
	}
	return out, nil
}

// printJSON prints v as indented JSON on stdout.
func printJSON(v any) error {
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseTokens parses a comma- or space-separated list of u32 token ids.
func parseTokens(s string) ([]uint32, error) {
	vals, err := parseUints(s, 32)
	ids := make([]uint32, len(vals))
	for i, v := range vals {
		ids[i] = uint32(v)
	}
	return ids, err
}
