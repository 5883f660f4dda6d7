package eventlog

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/ingest/zmqpub"
	"github.com/kvrouter/kvrouter/internal/testlog"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestCaptureRoundTrip: a live subscriber (real ZMQ publisher) with a capture hook feeds one store; the
// captured log, read back and applied to a fresh store, gives the same per-worker block counts.
func TestCaptureRoundTrip(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	pub, err := zmqpub.New(zmqpub.Options{Endpoint: "tcp://127.0.0.1:0", ReplayEndpoint: "tcp://127.0.0.1:0", BufferSteps: 64, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	live := statestore.NewMemory()
	if err := live.PutPool(ctx, "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := live.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w1"}, 1); err != nil {
		t.Fatal(err)
	}
	var buf testlog.Buffer
	cw := NewCaptureWriter(&buf)
	sub, err := ingest.NewSubscriber(ingest.SubscriberConfig{Pool: "default", WorkerID: "w1", Endpoint: pub.Addr(),
		ReplayEndpoint: pub.ReplayAddr(), BlockSize: 4, Logger: quiet, Capture: cw.Hook("w1", 0)}, live)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = sub.Run(sctx) }()
	if err := pub.WaitSubscribed(ctx); err != nil {
		t.Fatal(err)
	}
	batches := []vllmwire.Batch{
		{Events: []vllmwire.Event{{Kind: vllmwire.KindStored, BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4}}},
		{Events: []vllmwire.Event{{Kind: vllmwire.KindStored, BlockHashes: []uint64{3}, Parent: 2, HasParent: true, TokenIDs: []uint32{9, 10, 11, 12}, BlockSize: 4}}},
		{Events: []vllmwire.Event{{Kind: vllmwire.KindRemoved, BlockHashes: []uint64{3}}}},
	}
	for _, b := range batches {
		if _, err := pub.PublishBatch(ctx, b, vllmwire.EncodeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for cw.Lines() < int64(len(batches)) || sub.Stats().QueueDepth > 0 || sub.Stats().Applied.Applied < 3 {
		if ctx.Err() != nil {
			t.Fatalf("subscriber did not apply the messages: %+v, %d captured", sub.Stats(), cw.Lines())
		}
		time.Sleep(5 * time.Millisecond) // polling interval, not a timing assumption
	}
	stop()
	<-done
	if err := cw.Err(); err != nil {
		t.Fatal(err)
	}
	want, err := StoreBlocks(ctx, live, "default")
	if err != nil {
		t.Fatal(err)
	}
	l, err := Read(bytes.NewReader(buf.Bytes()), "default", 4)
	if err != nil {
		t.Fatal(err)
	}
	replayed := statestore.NewMemory()
	if _, err := Apply(ctx, replayed, "default", 4, l); err != nil {
		t.Fatal(err)
	}
	got, err := StoreBlocks(ctx, replayed, "default")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || want[0].Blocks != 2 {
		t.Errorf("replayed capture %+v, live %+v; want equal, 2 blocks", got, want)
	}
	if s := Stats(l, 4); len(s) != 1 || s[0].Blocks != 2 || s[0].MaxDepth != 2 {
		t.Errorf("stats of the capture %+v", s)
	}
}

// TestCaptureRestartIsNewEpoch: a seq lower than the previous one (a restarted engine) clears the rank.
func TestCaptureRestartIsNewEpoch(t *testing.T) {
	var buf bytes.Buffer
	cw := NewCaptureWriter(&buf)
	hook := cw.Hook("w1", 0)
	stored := func(hash uint64, tok uint32) []byte {
		p, err := vllmwire.Encode(vllmwire.Batch{Events: []vllmwire.Event{{Kind: vllmwire.KindStored, BlockHashes: []uint64{hash},
			TokenIDs: []uint32{tok, tok, tok, tok}, BlockSize: 4}}}, vllmwire.EncodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	hook(5, stored(1, 1))
	hook(6, stored(2, 2))
	hook(0, stored(3, 3)) // the engine restarted: only block 3 is held afterwards
	l, err := Read(&buf, "default", 4)
	if err != nil {
		t.Fatal(err)
	}
	st := statestore.NewMemory()
	if _, err := Apply(context.Background(), st, "default", 4, l); err != nil {
		t.Fatal(err)
	}
	got, _ := StoreBlocks(context.Background(), st, "default")
	if len(got) != 1 || got[0].Blocks != 1 {
		t.Errorf("after a restart: %+v; want 1 block", got)
	}
	if s := Stats(l, 4); s[0].Blocks != 1 {
		t.Errorf("stats after a restart: %+v; want 1 block", s)
	}
}
