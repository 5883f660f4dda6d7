package ingest

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
)

// Manager runs a set of subscribers, one per stream, all feeding one sink. Subscribers can be added
// and removed while it runs. Safe for concurrent use.
type Manager struct {
	sink Sink

	mu     sync.Mutex
	subs   map[StreamKey]*managed
	runCtx context.Context // non-nil while Run runs
	wg     sync.WaitGroup  // running subscriber goroutines
}

type managed struct {
	sub    *Subscriber
	cancel context.CancelFunc // nil until started
	done   chan struct{}      // closed when its Run has returned
}

// NewManager returns a manager with no subscribers; it starts nothing until Run.
func NewManager(sink Sink) *Manager {
	return &Manager{sink: sink, subs: map[StreamKey]*managed{}}
}

// Add registers a subscriber for cfg's stream and, if the manager runs, starts it. A stream already
// present is ErrDuplicate; an invalid cfg is ErrInvalidConfig.
func (m *Manager) Add(cfg SubscriberConfig) error {
	sub, err := NewSubscriber(cfg, m.sink)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.subs[sub.Key()]; ok {
		return fmt.Errorf("%w: %s", ErrDuplicate, sub.Key())
	}
	ms := &managed{sub: sub}
	m.subs[sub.Key()] = ms
	if m.runCtx != nil {
		m.start(ms)
	}
	return nil
}

// start runs ms under the manager's context. m.mu must be held.
func (m *Manager) start(ms *managed) {
	ctx, cancel := context.WithCancel(m.runCtx)
	ms.cancel, ms.done = cancel, make(chan struct{})
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(ms.done)
		_ = ms.sub.Run(ctx) // returns only when ctx is done
	}()
}

// Remove stops the stream's subscriber and waits until it has returned (or ctx is done). An unknown
// stream is ErrNotFound.
func (m *Manager) Remove(ctx context.Context, key StreamKey) error {
	m.mu.Lock()
	ms, ok := m.subs[key]
	delete(m.subs, key)
	var cancel context.CancelFunc
	var done chan struct{}
	if ok {
		cancel, done = ms.cancel, ms.done
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if cancel != nil {
		cancel()
	}
	if done == nil {
		return nil // never started
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ingest: remove %s: %w", key, ctx.Err())
	}
}

// Run starts every registered subscriber, and those added later, and blocks until ctx is done; it
// then stops them all and returns nil once every one has returned. A second concurrent Run is
// ErrAlreadyRunning.
func (m *Manager) Run(ctx context.Context) error {
	m.mu.Lock()
	if m.runCtx != nil {
		m.mu.Unlock()
		return ErrAlreadyRunning
	}
	m.runCtx = ctx
	for _, ms := range m.subs {
		m.start(ms)
	}
	m.mu.Unlock()

	<-ctx.Done()

	m.mu.Lock()
	m.runCtx = nil
	for _, ms := range m.subs {
		if ms.cancel != nil {
			ms.cancel()
			ms.cancel = nil
		}
	}
	m.mu.Unlock()
	m.wg.Wait()
	return nil
}

// Keys lists the registered streams, sorted.
func (m *Manager) Keys() []StreamKey {
	m.mu.Lock()
	keys := make([]StreamKey, 0, len(m.subs))
	for k := range m.subs {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	slices.SortFunc(keys, compareKeys)
	return keys
}

// Stats returns every registered subscriber's counters, sorted by stream.
func (m *Manager) Stats() []Stats {
	m.mu.Lock()
	out := make([]Stats, 0, len(m.subs))
	for _, ms := range m.subs {
		out = append(out, ms.sub.Stats())
	}
	m.mu.Unlock()
	slices.SortFunc(out, func(a, b Stats) int { return compareKeys(a.Key, b.Key) })
	return out
}

func compareKeys(a, b StreamKey) int {
	return cmp.Or(cmp.Compare(a.Pool, b.Pool), cmp.Compare(a.WorkerID, b.WorkerID), cmp.Compare(a.DPRank, b.DPRank))
}
