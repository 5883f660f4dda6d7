package api

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

type storeTimerKey struct{}

// withStoreTimer makes every instrumented store call made with ctx add its duration to *d (the store
// share of one decision). Calls are sequential within one decision, so no lock is needed.
func withStoreTimer(ctx context.Context, d *time.Duration) context.Context {
	return context.WithValue(ctx, storeTimerKey{}, d)
}

// InstrumentStore wraps a store so that every call is timed into m (by operation) and into the calling
// decision's store time. With m nil only the per-decision time is kept.
func InstrumentStore(s statestore.Store, m *Metrics) statestore.Store {
	return &timedStore{s: s, m: m}
}

type timedStore struct {
	s statestore.Store
	m *Metrics
}

func (t *timedStore) done(ctx context.Context, op string, start time.Time, err error) {
	d := time.Since(start)
	if p, ok := ctx.Value(storeTimerKey{}).(*time.Duration); ok {
		*p += d
	}
	if t.m == nil {
		return
	}
	t.m.storeTime.WithLabelValues(op).Observe(d.Seconds())
	if err != nil {
		t.m.storeErrors.WithLabelValues(op, statestore.ErrorCode(err)).Inc()
	}
}

func (t *timedStore) Name() string { return t.s.Name() }
func (t *timedStore) Close() error { return t.s.Close() }

func (t *timedStore) Ping(ctx context.Context) error {
	start := time.Now()
	err := t.s.Ping(ctx)
	t.done(ctx, "ping", start, err)
	return err
}

func (t *timedStore) PutPool(ctx context.Context, pool string, cfg statestore.PoolConfig) error {
	start := time.Now()
	err := t.s.PutPool(ctx, pool, cfg)
	t.done(ctx, "put_pool", start, err)
	return err
}

func (t *timedStore) GetPool(ctx context.Context, pool string) (statestore.PoolConfig, error) {
	start := time.Now()
	c, err := t.s.GetPool(ctx, pool)
	t.done(ctx, "get_pool", start, err)
	return c, err
}

func (t *timedStore) Pools(ctx context.Context) ([]statestore.PoolInfo, error) {
	start := time.Now()
	p, err := t.s.Pools(ctx)
	t.done(ctx, "pools", start, err)
	return p, err
}

func (t *timedStore) PutWorker(ctx context.Context, pool string, spec statestore.WorkerSpec, now int64) error {
	start := time.Now()
	err := t.s.PutWorker(ctx, pool, spec, now)
	t.done(ctx, "put_worker", start, err)
	return err
}

func (t *timedStore) RemoveWorker(ctx context.Context, pool, id string, now int64) error {
	start := time.Now()
	err := t.s.RemoveWorker(ctx, pool, id, now)
	t.done(ctx, "remove_worker", start, err)
	return err
}

// Workers pages through ListWorkers, so each page is timed as one store call.
func (t *timedStore) Workers(ctx context.Context, pool string, now int64) ([]statestore.WorkerInfo, error) {
	return statestore.AllWorkers(ctx, t, pool, now)
}

func (t *timedStore) ListWorkers(ctx context.Context, pool string, q statestore.WorkersQuery, now int64) (statestore.WorkerPage, error) {
	start := time.Now()
	w, err := t.s.ListWorkers(ctx, pool, q, now)
	t.done(ctx, "workers", start, err)
	return w, err
}

func (t *timedStore) ApplyEvents(ctx context.Context, b statestore.EventBatch) (statestore.ApplyResult, error) {
	start := time.Now()
	r, err := t.s.ApplyEvents(ctx, b)
	t.done(ctx, "apply_events", start, err)
	return r, err
}

func (t *timedStore) Route(ctx context.Context, req statestore.RouteRequest) (statestore.Decision, error) {
	start := time.Now()
	d, err := t.s.Route(ctx, req)
	t.done(ctx, "route", start, err)
	if t.m != nil && len(req.Releases) > 0 {
		t.m.carried.Add(float64(len(req.Releases))) // (a route put back after an error carries them again)
	}
	return d, err
}

func (t *timedStore) Explain(ctx context.Context, req statestore.RouteRequest) (statestore.Explanation, error) {
	start := time.Now()
	e, err := t.s.Explain(ctx, req)
	t.done(ctx, "explain", start, err)
	return e, err
}

func (t *timedStore) Overlap(ctx context.Context, pool string, seq []uint64, now int64) ([]statestore.Score, error) {
	start := time.Now()
	s, err := t.s.Overlap(ctx, pool, seq, now)
	t.done(ctx, "overlap", start, err)
	return s, err
}

func (t *timedStore) PrefillDone(ctx context.Context, pool, id string, now int64) (bool, error) {
	start := time.Now()
	ok, err := t.s.PrefillDone(ctx, pool, id, now)
	t.done(ctx, "prefill_done", start, err)
	return ok, err
}

func (t *timedStore) Done(ctx context.Context, pool, id string, now int64) (bool, error) {
	start := time.Now()
	ok, err := t.s.Done(ctx, pool, id, now)
	t.done(ctx, "done", start, err)
	return ok, err
}

func (t *timedStore) RenewLease(ctx context.Context, pool, id string, now int64) (bool, error) {
	start := time.Now()
	ok, err := t.s.RenewLease(ctx, pool, id, now)
	t.done(ctx, "renew_lease", start, err)
	return ok, err
}

func (t *timedStore) ReportForward(ctx context.Context, pool, worker string, ok bool, now int64) (statestore.WorkerHealth, error) {
	start := time.Now()
	h, err := t.s.ReportForward(ctx, pool, worker, ok, now)
	t.done(ctx, "report_forward", start, err)
	return h, err
}
