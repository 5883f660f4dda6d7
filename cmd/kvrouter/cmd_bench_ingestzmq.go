package main

import (
	"context"

	"github.com/kvrouter/kvrouter/internal/bench"
)

func init() {
	benchCommands["ingest-zmq"] = command{name: "ingest-zmq", summary: "ZMQ ingest throughput: local vLLM publisher → subscriber → decode → store (events/s, blocks/s)", run: runBenchIngestZMQ}
}

func runBenchIngestZMQ(ctx context.Context, args []string) error {
	fs := newFlagSet("bench ingest-zmq", "bench ingest-zmq [--store memory|redis://...] [flags]")
	storeURL := storeFlag(fs)
	messages := fs.Int("messages", 20000, "messages to publish")
	events := fs.Int("events", 4, "events per message (half Stored, half Removed of earlier chains)")
	blocks := fs.Int("blocks", 4, "blocks per Stored event")
	blockSize := fs.Int("block-size", 16, "block size, tokens")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	st, err := openStore(*storeURL, storeOptions{fresh: true})
	if err != nil {
		return err
	}
	defer st.Close()
	rep, err := bench.RunIngestZMQ(ctx, st, bench.IngestZMQOptions{Messages: *messages, Events: *events, Blocks: *blocks, BlockSize: *blockSize})
	if err != nil {
		return err
	}
	return printJSON(rep)
}
