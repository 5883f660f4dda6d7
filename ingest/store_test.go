package ingest

import (
	"context"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestSubscriberIntoMemoryStore runs the whole path — publisher, ZMQ, subscriber, Normalize — into
// the embedded store, and checks overlap answers, degraded marking on a lost message, and the index
// reset on an engine restart.
func TestSubscriberIntoMemoryStore(t *testing.T) {
	ctx := context.Background()
	store := statestore.NewMemory()
	if err := store.PutPool(ctx, "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := store.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w0", URL: "http://w0", DPSize: 1}, 0); err != nil {
		t.Fatal(err)
	}
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	seq := blockhash.Sequence(nil, blockhash.LocalHashes(nil, tokens, 4, blockhash.Seed))
	overlap := func() int {
		scores, err := store.Overlap(ctx, "default", seq, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(scores) == 0 {
			return 0
		}
		return scores[0].Blocks
	}
	rank := func() statestore.RankInfo {
		ws, err := store.Workers(ctx, "default", 0)
		if err != nil {
			t.Fatal(err)
		}
		return ws[0].Ranks[0]
	}
	stored := func(hashes []uint64, parent uint64, hasParent bool, toks []uint32) vllmwire.Batch {
		return vllmwire.Batch{TS: 1, Events: []vllmwire.Event{{
			Kind: vllmwire.KindStored, BlockHashes: hashes, Parent: parent, HasParent: hasParent,
			TokenIDs: toks, BlockSize: 4, Medium: "GPU",
		}}}
	}

	a := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	cfg := noProbe(testConfig(a)) // the restart below is seen in the engine's next message
	sub, _ := runSubscriber(t, cfg, store)
	a.waitSubscribed()
	enc := vllmwire.EncodeOptions{Hashes: vllmwire.HashBytes}
	if _, err := a.PublishBatch(ctx, stored([]uint64{101, 102}, 0, false, tokens[:8]), enc); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishBatch(ctx, stored([]uint64{103}, 102, true, tokens[8:]), enc); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, "3 blocks indexed", func() bool { return overlap() == 3 })
	if r := rank(); r.Degraded || r.LastEventID != 2 {
		t.Fatalf("rank %+v", r)
	}

	// A gap the replay fills: both removals applied, the rank stays healthy.
	removed := func(h uint64) vllmwire.Batch {
		return vllmwire.Batch{Events: []vllmwire.Event{{Kind: vllmwire.KindRemoved, BlockHashes: []uint64{h}}}}
	}
	lost, err := vllmwire.Encode(removed(103), enc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishLost(ctx, lost); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PublishBatch(ctx, removed(102), enc); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, "removals applied", func() bool { return overlap() == 1 })
	if r := rank(); r.Degraded || r.LastEventID != 4 {
		t.Fatalf("replayed gap: rank %+v", r)
	}

	// Engine restart: new process, sequence from 0; the old index is cleared before its events.
	a.Close()
	c := startPublisher(t, a.Addr(), a.ReplayAddr(), 0)
	c.waitSubscribed()
	if _, err := c.PublishBatch(ctx, stored([]uint64{201}, 0, false, []uint32{9, 9, 9, 9}), enc); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, "restart applied", func() bool { return sub.Stats().Applied.Restarts == 1 })
	if got := overlap(); got != 0 {
		t.Fatalf("overlap after restart = %d, want 0 (index cleared)", got)
	}
	if r := rank(); r.Epoch != sub.Stats().Epoch || r.LastEventID != 1 {
		t.Fatalf("rank %+v, subscriber epoch %q", r, sub.Stats().Epoch)
	}
}

// TestSubscriberLostMessageDegradesRank: a message the replay cannot provide makes the store count
// one gap and report the rank degraded, while later events still apply.
func TestSubscriberLostMessageDegradesRank(t *testing.T) {
	ctx := context.Background()
	store := statestore.NewMemory()
	if err := store.PutPool(ctx, "default", statestore.DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := store.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w0", URL: "http://w0"}, 0); err != nil {
		t.Fatal(err)
	}
	pub := startPublisher(t, "", "", 0) // no replay socket
	sub, _ := runSubscriber(t, testConfig(pub), store)
	pub.waitSubscribed()
	pub.publish(1)
	pub.lose(2)
	pub.publish(3)
	eventually(t, waitLong, "2 events applied", func() bool { return sub.Stats().Applied.Applied == 2 })
	ws, err := store.Workers(ctx, "default", 0)
	if err != nil {
		t.Fatal(err)
	}
	if r := ws[0].Ranks[0]; !r.Degraded || r.CachedBlocks != 2 {
		t.Fatalf("rank %+v, want degraded with 2 blocks", r)
	}
	if st := sub.Stats(); st.Applied.Gaps != 1 || st.LostMessages != 1 {
		t.Fatalf("stats %+v", st)
	}
}
