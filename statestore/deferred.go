package statestore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// Deferred is a Store that is not open yet: a router started while its Redis cannot be reached (down,
// restarting, a failover under way, a DNS name not published yet) serves anyway, not ready, instead of
// exiting and crash-looping. Until Connect succeeds every call answers ErrUnavailable at once (the HTTP
// layer's 503 store_unavailable with Retry-After; /readyz false), never blocking a request on a dial;
// after it, every call goes to the opened store. Connect is the only method that dials: the server's
// keeper calls it every recover interval until it succeeds (then declares the pools).
type Deferred struct {
	name string
	open func() (Store, error)

	cur    atomic.Pointer[storeRef]
	last   atomic.Pointer[errRef] // what calls answer until connected: the last open's error
	mu     sync.Mutex             // serialises Connect and Close (never taken by a call: no request waits on a dial)
	closed bool
}

type storeRef struct{ s Store }

type errRef struct{ err error }

// NewDeferred returns a store named name (the URL without credentials, for logs and metrics) whose
// backing store open makes; it does not call open (constructors never dial). cause is why the store is
// deferred (the first open's error), reported by calls until a Connect succeeds or fails anew.
func NewDeferred(name string, open func() (Store, error), cause error) *Deferred {
	d := &Deferred{name: name, open: open}
	if cause == nil {
		cause = errors.New("not connected yet")
	}
	d.fail(cause)
	return d
}

// fail records err as what calls answer, wrapped in ErrUnavailable unless it says ErrUnavailable or
// ErrInvalid already.
func (d *Deferred) fail(err error) error {
	if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrInvalid) {
		err = fmt.Errorf("%w: %s: %v", ErrUnavailable, d.name, err)
	}
	d.last.Store(&errRef{err})
	return err
}

// OpenOrDefer opens the store url names, as Open does; when that fails with ErrUnavailable (a Redis that
// cannot be reached yet) it returns a Deferred over the same Open instead, and that Deferred as pending
// (nil when the store opened). Any other error is returned as it is.
func OpenOrDefer(url string, o OpenOptions) (st Store, pending *Deferred, err error) {
	st, err = Open(url, o)
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return st, nil, err
	}
	_, name, _ := ParseRedisURL(url)
	pending = NewDeferred(name, func() (Store, error) { return Open(url, o) }, err)
	return pending, pending, nil
}

// Connect opens the backing store if it is not open yet (one attempt, bounded by the open function's
// own dial timeout) and returns nil once it is open. A failure is wrapped in ErrUnavailable when the
// open function did not say otherwise (any other error, ErrInvalid say, is returned as it is: it will
// not go away by retrying). Concurrent Connects take turns (one dial at a time); ctx is checked when this
// one's turn comes.
func (d *Deferred) Connect(ctx context.Context) error {
	if d == nil || d.cur.Load() != nil { // (nil: a store that opened at once, nothing to connect)
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return err
	}
	if d.closed {
		return d.fail(errors.New("closed"))
	}
	if d.cur.Load() != nil {
		return nil
	}
	s, err := d.open()
	if err != nil {
		return d.fail(err)
	}
	d.cur.Store(&storeRef{s})
	return nil
}

// Err is what every call answers until Connect succeeds (why the store is not open), nil once it is.
func (d *Deferred) Err() error {
	if d.cur.Load() != nil {
		return nil
	}
	return d.last.Load().err
}

// Connected reports whether Connect has succeeded.
func (d *Deferred) Connected() bool { return d.cur.Load() != nil }

// store returns the backing store, or the error every call answers before it is open.
func (d *Deferred) store() (Store, error) {
	if r := d.cur.Load(); r != nil {
		return r.s, nil
	}
	return nil, d.last.Load().err
}

// Name implements Store: the backing store's name once open, else the name given to NewDeferred.
func (d *Deferred) Name() string {
	if r := d.cur.Load(); r != nil {
		return r.s.Name()
	}
	return d.name
}

// Close implements Store: it closes the backing store if open, and stops later Connects.
func (d *Deferred) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	if r := d.cur.Load(); r != nil {
		return r.s.Close()
	}
	return nil
}

// Ping implements Store.
func (d *Deferred) Ping(ctx context.Context) error {
	s, err := d.store()
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

// PutPool implements Store.
func (d *Deferred) PutPool(ctx context.Context, pool string, cfg PoolConfig) error {
	s, err := d.store()
	if err != nil {
		return err
	}
	return s.PutPool(ctx, pool, cfg)
}

// GetPool implements Store.
func (d *Deferred) GetPool(ctx context.Context, pool string) (PoolConfig, error) {
	s, err := d.store()
	if err != nil {
		return PoolConfig{}, err
	}
	return s.GetPool(ctx, pool)
}

// Pools implements Store.
func (d *Deferred) Pools(ctx context.Context) ([]PoolInfo, error) {
	s, err := d.store()
	if err != nil {
		return nil, err
	}
	return s.Pools(ctx)
}

// PutWorker implements Store.
func (d *Deferred) PutWorker(ctx context.Context, pool string, spec WorkerSpec, nowMs int64) error {
	s, err := d.store()
	if err != nil {
		return err
	}
	return s.PutWorker(ctx, pool, spec, nowMs)
}

// RemoveWorker implements Store.
func (d *Deferred) RemoveWorker(ctx context.Context, pool, workerID string, nowMs int64) error {
	s, err := d.store()
	if err != nil {
		return err
	}
	return s.RemoveWorker(ctx, pool, workerID, nowMs)
}

// ListWorkers implements Store.
func (d *Deferred) ListWorkers(ctx context.Context, pool string, q WorkersQuery, nowMs int64) (WorkerPage, error) {
	s, err := d.store()
	if err != nil {
		return WorkerPage{}, err
	}
	return s.ListWorkers(ctx, pool, q, nowMs)
}

// Workers implements Store.
func (d *Deferred) Workers(ctx context.Context, pool string, nowMs int64) ([]WorkerInfo, error) {
	s, err := d.store()
	if err != nil {
		return nil, err
	}
	return s.Workers(ctx, pool, nowMs)
}

// ApplyEvents implements Store.
func (d *Deferred) ApplyEvents(ctx context.Context, batch EventBatch) (ApplyResult, error) {
	s, err := d.store()
	if err != nil {
		return ApplyResult{}, err
	}
	return s.ApplyEvents(ctx, batch)
}

// Route implements Store.
func (d *Deferred) Route(ctx context.Context, req RouteRequest) (Decision, error) {
	s, err := d.store()
	if err != nil {
		return Decision{}, err
	}
	return s.Route(ctx, req)
}

// Explain implements Store.
func (d *Deferred) Explain(ctx context.Context, req RouteRequest) (Explanation, error) {
	s, err := d.store()
	if err != nil {
		return Explanation{}, err
	}
	return s.Explain(ctx, req)
}

// Overlap implements Store.
func (d *Deferred) Overlap(ctx context.Context, pool string, seqHashes []uint64, nowMs int64) ([]Score, error) {
	s, err := d.store()
	if err != nil {
		return nil, err
	}
	return s.Overlap(ctx, pool, seqHashes, nowMs)
}

// PrefillDone implements Store.
func (d *Deferred) PrefillDone(ctx context.Context, pool, requestID string, nowMs int64) (bool, error) {
	s, err := d.store()
	if err != nil {
		return false, err
	}
	return s.PrefillDone(ctx, pool, requestID, nowMs)
}

// Done implements Store.
func (d *Deferred) Done(ctx context.Context, pool, requestID string, nowMs int64) (bool, error) {
	s, err := d.store()
	if err != nil {
		return false, err
	}
	return s.Done(ctx, pool, requestID, nowMs)
}

// ReportForward implements Store.
func (d *Deferred) ReportForward(ctx context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error) {
	s, err := d.store()
	if err != nil {
		return WorkerHealth{}, err
	}
	return s.ReportForward(ctx, pool, workerID, ok, nowMs)
}

// RenewLease implements Store.
func (d *Deferred) RenewLease(ctx context.Context, pool, requestID string, nowMs int64) (bool, error) {
	s, err := d.store()
	if err != nil {
		return false, err
	}
	return s.RenewLease(ctx, pool, requestID, nowMs)
}

var _ Store = (*Deferred)(nil)
