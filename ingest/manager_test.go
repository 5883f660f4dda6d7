package ingest

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestManagerAddRemoveStop(t *testing.T) {
	pubA := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	pubB := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{}
	m := NewManager(sink)

	cfgA := testConfig(pubA)
	cfgA.WorkerID = "a"
	if err := m.Add(cfgA); err != nil {
		t.Fatal(err)
	}
	if err := m.Add(cfgA); !errors.Is(err, ErrDuplicate) {
		t.Fatalf("duplicate Add: %v", err)
	}
	if err := m.Add(SubscriberConfig{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("invalid Add: %v", err)
	}
	dead := testConfig(nil)
	dead.WorkerID, dead.Endpoint = "dead", "tcp://127.0.0.1:1" // never connects: stopped while backing off
	if err := m.Add(dead); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()

	pubA.waitSubscribed()
	pubA.publish(1, 2)
	eventually(t, waitLong, "worker a's events", func() bool { return sink.count() == 2 })

	// Added while running.
	cfgB := testConfig(pubB)
	cfgB.WorkerID, cfgB.DPRank = "b", 1
	if err := m.Add(cfgB); err != nil {
		t.Fatal(err)
	}
	pubB.waitSubscribed()
	pubB.publish(3)
	eventually(t, waitLong, "worker b's event", func() bool { return sink.count() == 3 })
	if ev := sink.snapshot()[2]; ev.DPRank != 1 {
		t.Fatalf("worker b's event on rank %d, want the configured 1", ev.DPRank)
	}

	keys := m.Keys()
	if len(keys) != 3 || keys[0].WorkerID != "a" || keys[1].WorkerID != "b" || keys[2].WorkerID != "dead" {
		t.Fatalf("keys %v", keys)
	}
	st := m.Stats()
	if len(st) != 3 || st[0].Messages != 2 || st[1].Messages != 1 || st[2].Connected {
		t.Fatalf("stats %+v", st)
	}

	rmCtx, rmCancel := context.WithTimeout(context.Background(), waitLong)
	defer rmCancel()
	if err := m.Remove(rmCtx, cfgA.Key()); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(rmCtx, cfgA.Key()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second Remove: %v", err)
	}
	if len(m.Keys()) != 2 {
		t.Fatalf("keys after Remove: %v", m.Keys())
	}

	if err := m.Run(ctx); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Run: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run did not return after cancel")
	}
	checkNoLeaks(t)
}

// TestNoGoroutineLeaks runs last in this file's order of interest: every subscriber started by the
// tests above has been stopped, so nothing of the ingest may remain.
func TestNoGoroutineLeaks(t *testing.T) {
	pub := startPublisher(t, "", "tcp://127.0.0.1:0", 0)
	sink := &recordingSink{gate: make(chan struct{})} // stalled: stop must not wait for the sink
	cfg := testConfig(pub)
	cfg.QueueSize = 2
	_, stop := runSubscriber(t, cfg, sink)
	pub.waitSubscribed()
	pub.publish(seqRange(0, 50)...)
	eventually(t, waitLong, "subscriber stalled on a full queue", func() bool {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		return sink.waiting == 1
	})
	stop()
	checkNoLeaks(t)
}
