package ingest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/ingest/zmqpub"
	"github.com/kvrouter/kvrouter/statestore"
)

// testLogger discards logs unless KVROUTER_TEST_LOG is set (t.Log cannot be used: zmq4 goroutines
// may log after a test has finished).
func testLogger() *slog.Logger {
	if os.Getenv("KVROUTER_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

const waitLong = 15 * time.Second

// recordingSink records every successfully applied batch. With a gate it blocks each call until
// the gate is closed; with failFirst it fails that many calls first.
type recordingSink struct {
	mu        sync.Mutex
	batches   []statestore.EventBatch
	events    []statestore.Event
	gate      chan struct{}
	failFirst int
	calls     int
	waiting   int // calls blocked at the gate
}

var errSinkDown = errors.New("sink down")

func (s *recordingSink) ApplyEvents(ctx context.Context, b statestore.EventBatch) (statestore.ApplyResult, error) {
	s.mu.Lock()
	s.calls++
	if s.calls <= s.failFirst {
		s.mu.Unlock()
		return statestore.ApplyResult{}, errSinkDown
	}
	gate := s.gate
	s.waiting++
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			s.mu.Lock()
			s.waiting--
			s.mu.Unlock()
			return statestore.ApplyResult{}, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.waiting--
	b.Events = append([]statestore.Event(nil), b.Events...)
	s.batches = append(s.batches, b)
	s.events = append(s.events, b.Events...)
	return statestore.ApplyResult{Applied: len(b.Events)}, nil
}

func (s *recordingSink) snapshot() []statestore.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]statestore.Event(nil), s.events...)
}

func (s *recordingSink) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.events)
}

// markers are the engine hashes of the recorded Stored events, in order.
func markers(evs []statestore.Event) []uint64 {
	var out []uint64
	for _, ev := range evs {
		for _, b := range ev.Blocks {
			out = append(out, b.EngineHash)
		}
	}
	return out
}

func seqRange(from, to uint64) []uint64 {
	var out []uint64
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// payload is one message holding one Stored block whose engine hash is marker.
func payload(t *testing.T, marker uint64) []byte {
	t.Helper()
	b := vllmwire.Batch{TS: float64(time.Now().UnixMilli()) / 1000, Events: []vllmwire.Event{{
		Kind: vllmwire.KindStored, BlockHashes: []uint64{marker},
		TokenIDs: []uint32{uint32(marker), 1, 2, 3}, BlockSize: 4, Medium: "GPU",
	}}}
	p, err := vllmwire.Encode(b, vllmwire.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type testPublisher struct {
	*zmqpub.Publisher
	t *testing.T
}

// startPublisher starts a publisher on ephemeral ports (or the given ones), closed at cleanup.
func startPublisher(t *testing.T, endpoint, replay string, bufferSteps int) *testPublisher {
	t.Helper()
	if endpoint == "" {
		endpoint = "tcp://127.0.0.1:0"
	}
	p, err := zmqpub.New(zmqpub.Options{Endpoint: endpoint, ReplayEndpoint: replay, BufferSteps: bufferSteps, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	// Rebinding a port a moment after its previous owner closed can fail briefly.
	eventually(t, waitLong, "publisher bind", func() bool { return p.Start(context.Background()) == nil })
	t.Cleanup(func() { p.Close() })
	return &testPublisher{Publisher: p, t: t}
}

func (p *testPublisher) publish(markers ...uint64) {
	p.t.Helper()
	for _, m := range markers {
		if _, err := p.Publish(context.Background(), payload(p.t, m)); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *testPublisher) lose(markers ...uint64) {
	p.t.Helper()
	for _, m := range markers {
		if _, err := p.PublishLost(context.Background(), payload(p.t, m)); err != nil {
			p.t.Fatal(err)
		}
	}
}

// publishUntilReceived publishes markers next, next+1, … (one every 10ms) until the sink holds more
// than have events: the way through ZMQ's slow joiner when the subscription's arrival cannot be
// observed. It returns the next unpublished marker.
func (p *testPublisher) publishUntilReceived(sink *recordingSink, have int, next uint64) uint64 {
	p.t.Helper()
	eventually(p.t, waitLong, "a live message to get through", func() bool {
		if sink.count() > have {
			return true
		}
		p.publish(next)
		next++
		time.Sleep(10 * time.Millisecond)
		return sink.count() > have
	})
	return next
}

func (p *testPublisher) waitSubscribed() {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if err := p.WaitSubscribed(ctx); err != nil {
		p.t.Fatal(err)
	}
}

func testConfig(p *testPublisher) SubscriberConfig {
	cfg := SubscriberConfig{
		Pool: "default", WorkerID: "w0", BlockSize: 4,
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
		Logger: testLogger(),
	}
	if p != nil {
		cfg.Endpoint, cfg.ReplayEndpoint = p.Addr(), p.ReplayAddr()
	}
	return cfg
}

// runSubscriber runs a subscriber until the returned stop (also run at cleanup) is called.
func runSubscriber(t *testing.T, cfg SubscriberConfig, sink Sink) (*Subscriber, func()) {
	t.Helper()
	sub, err := NewSubscriber(cfg, sink)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := sub.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(waitLong):
				t.Errorf("subscriber did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return sub, stop
}

// leakedGoroutines lists goroutines still running code of package ingest, or zmq4's reader of a
// subscriber-side (SUB/DEALER) connection. zmq4's PUB/ROUTER internals are excluded: the
// publisher is a test fixture, and zmq4 never stops a PUB socket's writer goroutine.
func leakedGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var leaked []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "testing.tRunner") || strings.Contains(g, "leakedGoroutines") {
			continue
		}
		if strings.Contains(g, "kvrouter/kvrouter/ingest.") || strings.Contains(g, "zmq4.(*qreader).listen") {
			leaked = append(leaked, g)
		}
	}
	return leaked
}

func checkNoLeaks(t *testing.T) {
	t.Helper()
	var leaked []string
	deadline := time.Now().Add(waitLong)
	for {
		if leaked = leakedGoroutines(); len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
		time.Sleep(5 * time.Millisecond)
	}
}
