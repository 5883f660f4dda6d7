package bench

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/ingest/zmqpub"
	"github.com/kvrouter/kvrouter/statestore"
)

// IngestZMQOptions configure RunIngestZMQ.
type IngestZMQOptions struct {
	// Messages to publish, Events per message (half Stored, half Removed of earlier chains), Blocks per
	// Stored event, BlockSize tokens.
	Messages, Events, Blocks, BlockSize int
}

// IngestZMQReport is what `kvrouter bench ingest-zmq` prints.
type IngestZMQReport struct {
	Benchmark        string                 `json:"benchmark"`
	Store            string                 `json:"store"`
	Messages         int                    `json:"messages"`
	Events           int                    `json:"events"`
	Blocks           int                    `json:"blocks"`
	EventsPerMessage int                    `json:"events_per_message"`
	BlocksPerEvent   int                    `json:"blocks_per_event"`
	Seconds          float64                `json:"seconds"`
	PublishSeconds   float64                `json:"publish_seconds"`
	EventsPerS       float64                `json:"events_per_s"`
	BlocksPerS       float64                `json:"blocks_per_s"`
	MessagesPerS     float64                `json:"messages_per_s"`
	Applied          statestore.ApplyResult `json:"applied"`
	Gaps             uint64                 `json:"gaps"`
	ReplayedMessages uint64                 `json:"replayed_messages"`
	LostMessages     uint64                 `json:"lost_messages"`
}

// RunIngestZMQ publishes pre-encoded vLLM KV-event messages from a local ZMQ publisher to one ingest
// subscriber feeding st, and measures until every event was applied.
func RunIngestZMQ(ctx context.Context, st statestore.Store, o IngestZMQOptions) (IngestZMQReport, error) {
	rep := IngestZMQReport{Benchmark: "ingest-zmq", Store: st.Name(), Messages: o.Messages, EventsPerMessage: o.Events, BlocksPerEvent: o.Blocks}
	if o.Messages < 1 || o.Events < 1 || o.Blocks < 1 || o.BlockSize < 1 {
		return rep, errors.New("messages, events, blocks and block size must be >= 1")
	}
	const pool, worker = "bench", "w1"
	if err := st.PutPool(ctx, pool, statestore.DefaultPoolConfig(o.BlockSize)); err != nil {
		return rep, err
	}
	if err := st.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: worker, DPSize: 1}, time.Now().UnixMilli()); err != nil {
		return rep, err
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := zmqpub.New(zmqpub.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0",
		BufferSteps: o.Messages + 1, Logger: quiet})
	if err != nil {
		return rep, err
	}
	if err := pub.Start(ctx); err != nil {
		return rep, err
	}
	defer pub.Close()
	// Pre-encode every payload: chains of `blocks` blocks with distinct tokens; each message stores
	// events/2 chains and removes the chains stored two messages earlier, so the index stays small.
	nStored := max(o.Events/2, 1)
	nRemoved := o.Events - nStored
	payloads := make([][]byte, o.Messages)
	var totalEvents, totalBlocks int
	hash := func(m, e, b int) uint64 { return uint64(m)<<24 | uint64(e)<<12 | uint64(b) + 1 }
	tok := uint32(1)
	for m := range payloads {
		b := vllmwire.Batch{TS: float64(time.Now().UnixNano()) / 1e9, HasDPRank: true}
		for e := 0; e < nStored; e++ {
			ev := vllmwire.Event{Kind: vllmwire.KindStored, BlockSize: o.BlockSize, Medium: "GPU"}
			for k := 0; k < o.Blocks; k++ {
				ev.BlockHashes = append(ev.BlockHashes, hash(m, e, k))
				for j := 0; j < o.BlockSize; j++ {
					ev.TokenIDs = append(ev.TokenIDs, tok)
					tok++
				}
			}
			b.Events = append(b.Events, ev)
			totalBlocks += o.Blocks
		}
		if m >= 2 {
			for e := 0; e < nRemoved && e < nStored; e++ {
				ev := vllmwire.Event{Kind: vllmwire.KindRemoved, Medium: "GPU"}
				for k := o.Blocks - 1; k >= 0; k-- {
					ev.BlockHashes = append(ev.BlockHashes, hash(m-2, e, k))
				}
				b.Events = append(b.Events, ev)
				totalBlocks += o.Blocks
			}
		}
		totalEvents += len(b.Events)
		if payloads[m], err = vllmwire.Encode(b, vllmwire.EncodeOptions{}); err != nil {
			return rep, err
		}
	}
	sub, err := ingest.NewSubscriber(ingest.SubscriberConfig{Pool: pool, WorkerID: worker, Endpoint: pub.Addr(),
		ReplayEndpoint: pub.ReplayAddr(), BlockSize: o.BlockSize, Logger: quiet}, st)
	if err != nil {
		return rep, err
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(sctx) }()
	if err := pub.WaitSubscribed(ctx); err != nil {
		return rep, err
	}
	start := time.Now()
	for _, p := range payloads {
		if _, err := pub.Publish(ctx, p); err != nil {
			return rep, err
		}
	}
	publishDone := time.Since(start)
	for {
		s := sub.Stats()
		if s.HasSeq && s.LastSeq == uint64(o.Messages-1) && s.QueueDepth == 0 && s.Applied.Applied+s.Applied.Stale >= totalEvents-s.Events.Unhashable {
			break
		}
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		time.Sleep(time.Millisecond)
	}
	el := time.Since(start)
	cancel()
	<-done
	s := sub.Stats()
	rep.Events, rep.Blocks, rep.Seconds, rep.PublishSeconds = totalEvents, totalBlocks, el.Seconds(), publishDone.Seconds()
	rep.EventsPerS, rep.BlocksPerS = float64(totalEvents)/el.Seconds(), float64(totalBlocks)/el.Seconds()
	rep.MessagesPerS = float64(o.Messages) / el.Seconds()
	rep.Applied, rep.Gaps, rep.ReplayedMessages, rep.LostMessages = s.Applied, s.Gaps, s.ReplayedMessages, s.LostMessages
	return rep, nil
}
