package ingest

import (
	"context"
	"math"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// checkIDs asserts the events carry one epoch and consecutive ids from 1, except after the listed
// indexes, where exactly one id is skipped (a lost message).
func checkIDs(t *testing.T, evs []statestore.Event, skipsBefore ...int) {
	t.Helper()
	want := uint64(1)
	for i, ev := range evs {
		if slices.Contains(skipsBefore, i) {
			want++
		}
		if !ev.HasEventID || ev.EventID != want || ev.Epoch != evs[0].Epoch || ev.Epoch == "" {
			t.Fatalf("event %d: id %d (has %v) epoch %q; want id %d epoch %q", i, ev.EventID, ev.HasEventID, ev.Epoch, want, evs[0].Epoch)
		}
		want++
	}
}

func TestSubscriberInOrder(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(seqRange(100, 150)...)

	eventually(t, waitLong, "50 events", func() bool { return sink.count() == 50 })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, seqRange(100, 150)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	for _, b := range sink.batches {
		if b.Pool != "default" || b.WorkerID != "w0" || b.NowMs == 0 {
			t.Fatalf("batch header %+v", b)
		}
	}
	st := sub.Stats()
	if st.Messages != 50 || st.Gaps != 0 || st.LostMessages != 0 || st.Events.Stored != 50 || !st.Connected || st.LastSeq != 49 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberSlowJoiner: messages published before the subscriber connected are lost live (ZMQ's
// slow joiner) but recovered at the first message by replaying from seq 0.
func TestSubscriberSlowJoiner(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	pub.publish(seqRange(0, 10)...) // nobody listens yet
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(seqRange(10, 15)...)

	eventually(t, waitLong, "15 events", func() bool { return sink.count() == 15 })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, seqRange(0, 15)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	if st := sub.Stats(); st.ReplayedMessages != 10 || st.PartialHistory != 0 || st.LostMessages != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubscriberGapReplay(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(seqRange(0, 5)...)
	pub.lose(seqRange(5, 8)...) // in the replay buffer, never sent
	pub.publish(seqRange(8, 12)...)

	eventually(t, waitLong, "12 events", func() bool { return sink.count() == 12 })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, seqRange(0, 12)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	st := sub.Stats()
	if st.Gaps != 1 || st.MissedMessages != 3 || st.ReplayedMessages != 3 || st.LostMessages != 0 || st.Replays != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberGapWithoutReplay: with no replay socket a gap is lost for good; the next event skips
// one id so the store reports the rank degraded.
func TestSubscriberGapWithoutReplay(t *testing.T) {
	pub := startPublisher(t, "", "", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(0, 1)
	pub.lose(2)
	pub.publish(3)

	eventually(t, waitLong, "3 events", func() bool { return sink.count() == 3 })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, []uint64{0, 1, 3}) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs, 2)
	if st := sub.Stats(); st.Gaps != 1 || st.LostMessages != 1 || st.Replays != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberGapBeyondBuffer: the replay buffer holds only the newest messages of a long gap.
func TestSubscriberGapBeyondBuffer(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 4)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(0)
	eventually(t, waitLong, "first event", func() bool { return sink.count() == 1 })
	pub.lose(seqRange(1, 11)...) // the buffer (4) keeps 8, 9, 10 and then 11
	pub.publish(11)

	eventually(t, waitLong, "5 events", func() bool { return sink.count() == 5 })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, []uint64{0, 8, 9, 10, 11}) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs, 1)
	if st := sub.Stats(); st.LostMessages != 7 || st.ReplayedMessages != 3 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubscriberMalformedPayload(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(0)
	if _, err := pub.Publish(context.Background(), []byte{0x92, 0xcb}); err != nil {
		t.Fatal(err)
	}
	pub.publish(2)
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })
	checkIDs(t, sink.snapshot(), 1)
	if st := sub.Stats(); st.Malformed != 1 || st.LostMessages != 1 || st.Gaps != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberRestartBackwards: the engine restarts (a new publisher on the same ports, sequence
// from 0 again); the subscriber reconnects and opens a new epoch.
// noProbe turns the restart probe off: the test is about a restart seen in the engine's messages.
func noProbe(cfg SubscriberConfig) SubscriberConfig {
	cfg.RestartProbeInterval = -1
	return cfg
}

func TestSubscriberRestartBackwards(t *testing.T) {
	a := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, noProbe(testConfig(a)), sink)
	a.waitSubscribed()
	a.publish(seqRange(0, 20)...)
	eventually(t, waitLong, "20 events", func() bool { return sink.count() == 20 })
	oldEpoch := sink.snapshot()[0].Epoch
	a.Close()

	b := startPublisher(t, a.Addr(), a.ReplayAddr(), 0)
	b.waitSubscribed()
	b.publish(1000, 1001, 1002)
	eventually(t, waitLong, "23 events", func() bool { return sink.count() == 23 })
	evs := sink.snapshot()[20:]
	if got := markers(evs); !slices.Equal(got, []uint64{1000, 1001, 1002}) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	if evs[0].Epoch == oldEpoch {
		t.Fatal("restart kept the epoch")
	}
	if st := sub.Stats(); st.Restarts != 1 || st.Reconnects == 0 || st.Epoch != evs[0].Epoch {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberRestartDetectedByReplay: the restarted engine has already published past the last
// sequence number applied, so the sequence does not go backwards; the replayed payload of that
// number differs from the applied one, which reveals the restart.
func TestSubscriberRestartDetectedByReplay(t *testing.T) {
	a := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, noProbe(testConfig(a)), sink)
	a.waitSubscribed()
	a.publish(0, 1, 2)
	eventually(t, waitLong, "3 events", func() bool { return sink.count() == 3 })
	oldEpoch := sink.snapshot()[0].Epoch
	a.Close()

	b := startPublisher(t, a.Addr(), a.ReplayAddr(), 0)
	b.lose(seqRange(1000, 1010)...) // seq 0..9 of the new process, before the subscriber is back
	b.waitSubscribed()
	b.publish(1010) // seq 10 > 2: looks like a gap
	eventually(t, waitLong, "14 events", func() bool { return sink.count() == 14 })
	evs := sink.snapshot()[3:]
	if got := markers(evs); !slices.Equal(got, seqRange(1000, 1011)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	if evs[0].Epoch == oldEpoch {
		t.Fatal("restart kept the epoch")
	}
	if st := sub.Stats(); st.Restarts != 1 || st.LostMessages != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberNewRunNewEpoch: a second run of a subscriber (an ingest restart) opens a new epoch
// and rebuilds the rank from the engine's replay buffer instead of trusting ids it did not assign.
func TestSubscriberNewRunNewEpoch(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	cfg := testConfig(pub)
	_, stop := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.publish(0, 1)
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })
	stop()

	runSubscriber(t, cfg, sink)
	// The old connection's subscription may still be registered: waitSubscribed cannot tell.
	next := pub.publishUntilReceived(sink, 2, 2)
	eventually(t, waitLong, "all events", func() bool { return sink.count() == 2+int(next) })
	evs := sink.snapshot()[2:]
	if got := markers(evs); !slices.Equal(got, seqRange(0, next)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	if evs[0].Epoch == sink.snapshot()[0].Epoch {
		t.Fatal("a new run must start a new epoch")
	}
}

// TestSubscriberReconnectSameEngine: the connection drops but the engine lives on. After the
// reconnect, continuity is verified against the replay buffer, the messages published meanwhile
// are replayed, and the epoch is kept.
func TestSubscriberReconnectSameEngine(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	proxy := startProxy(t, pub.Addr())
	cfg := testConfig(pub)
	cfg.Endpoint = proxy.addr
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.publish(0, 1)
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })

	proxy.cut()
	eventually(t, waitLong, "reconnected", func() bool { st := sub.Stats(); return st.Reconnects >= 1 && st.Connected })
	pub.lose(2, 3) // published while the subscriber was away
	// The new subscription reaches the publisher at some point (slow joiner): publish until a live
	// message gets through; whatever is missed live is replayed.
	next := pub.publishUntilReceived(sink, 2, 4)
	eventually(t, waitLong, "all events", func() bool { return sink.count() == int(next) })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, seqRange(0, next)) {
		t.Fatalf("markers %v", got)
	}
	checkIDs(t, evs)
	if st := sub.Stats(); st.Restarts != 0 || st.LostMessages != 0 || st.ReplayedMessages < 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubscriberReconnectsWithBackoff(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "tcp://" + l.Addr().String()
	l.Close()
	sink := &recordingSink{}
	cfg := testConfig(nil)
	cfg.Endpoint = addr
	sub, _ := runSubscriber(t, cfg, sink)
	eventually(t, waitLong, "reconnect attempts", func() bool { return sub.Stats().Reconnects >= 3 })
	if sub.Stats().Connected {
		t.Fatal("connected to nothing")
	}
	pub := startPublisher(t, addr, "", 0)
	pub.waitSubscribed()
	pub.publish(7)
	eventually(t, waitLong, "event after connect", func() bool { return sink.count() == 1 })
}

func TestSubscriberSinkRetry(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{failFirst: 2}
	cfg := testConfig(pub)
	cfg.ApplyRetryMin, cfg.ApplyRetryMax = time.Millisecond, 5*time.Millisecond
	sub, _ := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.publish(1, 2, 3)
	eventually(t, waitLong, "3 events", func() bool { return sink.count() == 3 })
	checkIDs(t, sink.snapshot())
	if st := sub.Stats(); st.ApplyErrors != 2 || st.Applied.Applied != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// TestSubscriberBackPressure: with a stalled sink the subscriber stops reading once its bounded
// queue is full; nothing piles up in the ingest, and nothing is lost when the sink recovers.
func TestSubscriberBackPressure(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	gate := make(chan struct{})
	sink := &recordingSink{gate: gate}
	cfg := testConfig(pub)
	cfg.QueueSize, cfg.MaxBatchEvents = 4, 1
	sub, _ := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	const n = 300
	pub.publish(seqRange(0, n)...)

	// In flight at most: 1 message in the blocked ApplyEvents call, QueueSize queued, 1 held by the
	// reader waiting to enqueue.
	const bound = 1 + 4 + 1
	eventually(t, waitLong, "queue full", func() bool {
		st := sub.Stats()
		return st.QueueDepth == 4 && st.Messages == bound
	})
	for deadline := time.Now().Add(200 * time.Millisecond); time.Now().Before(deadline); {
		if st := sub.Stats(); st.Messages > bound || st.QueueDepth > 4 {
			t.Fatalf("read past the bound while the sink is stalled: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(gate)
	eventually(t, waitLong, "all events", func() bool { return sink.count() == n })
	evs := sink.snapshot()
	if got := markers(evs); !slices.Equal(got, seqRange(0, n)) {
		t.Fatalf("markers out of order")
	}
	checkIDs(t, evs)
	if st := sub.Stats(); st.LostMessages != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	if _, err := NewSubscriber(SubscriberConfig{}, &recordingSink{}); err == nil {
		t.Fatal("empty config accepted")
	}
	cfg := SubscriberConfig{Pool: "p", WorkerID: "w", Endpoint: "tcp://h:5557", BlockSize: 16}
	if _, err := NewSubscriber(cfg, nil); err == nil {
		t.Fatal("nil sink accepted")
	}
	if _, err := NewSubscriber(cfg, &recordingSink{}); err != nil {
		t.Fatal(err)
	}
	cfg.ReconnectMin, cfg.ReconnectMax = time.Second, time.Millisecond
	if err := cfg.Validate(); err == nil {
		t.Fatal("min > max accepted")
	}
}

// TestSubscriberSequenceJump (defect 6): a sequence jumping to 2^64−1 is one gap of one message — the
// counters never take the distance (1.8e19) — and the message after it wraps to 0, an engine restart.
func TestSubscriberSequenceJump(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	sub, _ := runSubscriber(t, testConfig(pub), sink)
	pub.waitSubscribed()
	pub.publish(0, 1)
	eventually(t, waitLong, "2 events", func() bool { return sink.count() == 2 })
	pub.JumpTo(math.MaxUint64)
	pub.publish(2)
	eventually(t, waitLong, "3 events", func() bool { return sink.count() == 3 })
	st := sub.Stats()
	if st.Gaps != 1 || st.MissedMessages != 1 || st.LostMessages != 1 || st.LastSeq != math.MaxUint64 {
		t.Fatalf("stats after the jump %+v; want 1 gap, 1 missed, 1 lost", st)
	}
	pub.publish(3) // seq wraps to 0: backwards, a restart
	eventually(t, waitLong, "4 events", func() bool { return sink.count() == 4 })
	if st := sub.Stats(); st.Restarts != 1 || st.MissedMessages != 1 || st.LostMessages != 1 {
		t.Fatalf("stats after the wrap %+v", st)
	}
}
