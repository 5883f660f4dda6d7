package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/ingest/zmqpub"
	"github.com/kvrouter/kvrouter/statestore"
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
	const pool, worker = "bench", "w1"
	if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(*blockSize)); err != nil {
		return err
	}
	if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: worker, DPSize: 1}, time.Now().UnixMilli()); err != nil {
		return err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := zmqpub.New(zmqpub.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		BufferSteps: *messages + 1, Logger: quiet})
	if err != nil {
		return err
	}
	if err := pub.Start(ctx); err != nil {
		return err
	}
	defer pub.Close()
	// Pre-encode every payload: chains of `blocks` blocks with distinct tokens; each message stores
	// events/2 chains and removes the chains stored two messages earlier, so the index stays small.
	nStored := max(*events/2, 1)
	nRemoved := *events - nStored
	payloads := make([][]byte, *messages)
	var totalEvents, totalBlocks int
	hash := func(m, e, b int) uint64 { return uint64(m)<<24 | uint64(e)<<12 | uint64(b) + 1 }
	tok := uint32(1)
	for m := range payloads {
		b := vllmwire.Batch{TS: float64(time.Now().UnixNano()) / 1e9, HasDPRank: true}
		for e := 0; e < nStored; e++ {
			ev := vllmwire.Event{Kind: vllmwire.KindStored, BlockSize: *blockSize, Medium: "GPU"}
			for k := 0; k < *blocks; k++ {
				ev.BlockHashes = append(ev.BlockHashes, hash(m, e, k))
				for j := 0; j < *blockSize; j++ {
					ev.TokenIDs = append(ev.TokenIDs, tok)
					tok++
				}
			}
			b.Events = append(b.Events, ev)
			totalBlocks += *blocks
		}
		if m >= 2 {
			for e := 0; e < nRemoved && e < nStored; e++ {
				ev := vllmwire.Event{Kind: vllmwire.KindRemoved, Medium: "GPU"}
				for k := *blocks - 1; k >= 0; k-- {
					ev.BlockHashes = append(ev.BlockHashes, hash(m-2, e, k))
				}
				b.Events = append(b.Events, ev)
				totalBlocks += *blocks
			}
		}
		totalEvents += len(b.Events)
		if payloads[m], err = vllmwire.Encode(b, vllmwire.EncodeOptions{}); err != nil {
			return err
		}
	}
	sub, err := ingest.NewSubscriber(ingest.SubscriberConfig{Pool: pool, WorkerID: worker, Endpoint: pub.Addr(),
		ReplayEndpoint: pub.ReplayAddr(), BlockSize: *blockSize, Logger: quiet}, st)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(sctx) }()
	if err := pub.WaitSubscribed(ctx); err != nil {
		return err
	}
	start := time.Now()
	for _, p := range payloads {
		if _, err := pub.Publish(ctx, p); err != nil {
			return err
		}
	}
	publishDone := time.Since(start)
	for {
		s := sub.Stats()
		if s.HasSeq && s.LastSeq == uint64(*messages-1) && s.QueueDepth == 0 && s.Applied.Applied+s.Applied.Stale >= totalEvents-s.Events.Unhashable {
			break
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	cancel()
	<-done
	s := sub.Stats()
	out := map[string]any{
		"benchmark": "ingest-zmq", "store": st.Name(), "messages": *messages, "events": totalEvents, "blocks": totalBlocks,
		"events_per_message": *events, "blocks_per_event": *blocks, "seconds": el.Seconds(),
		"publish_seconds": publishDone.Seconds(),
		"events_per_s":    float64(totalEvents) / el.Seconds(), "blocks_per_s": float64(totalBlocks) / el.Seconds(),
		"messages_per_s": float64(*messages) / el.Seconds(), "applied": s.Applied, "gaps": s.Gaps,
		"replayed_messages": s.ReplayedMessages, "lost_messages": s.LostMessages,
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
