// Package core is kvrouter's transport-free routing model: it turns API inputs (token ids, hashes, JSON
// events, knobs) into state-store operations, hashing prompts (blockhash), validating knobs and presets,
// and supplying the clock and the random number every decision takes. The decision itself — filter,
// overlap, cost, pick, book — is one atomic statestore call. HTTP servers, Lambda handlers, the ingest
// service, the simulator and the replay tool all go through a Router.
package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// Options configure a Router.
type Options struct {
	// Now returns the current time in milliseconds. Default: the wall clock (Unix ms).
	Now func() int64
	// Random returns a uniform number in [0,1) for tie-breaks and softmax. Default: math/rand/v2.
	Random func() float64
	// PoolCacheTTL is how long a pool's block size and prompt limit are cached per router (they are
	// configuration, not routing state). Default 5 s; negative disables the cache.
	PoolCacheTTL time.Duration
	// ReleaseDelay is how long a finished request's done (Release) may wait for this router's next route
	// of its pool to carry it (releases.go: release coalescing) before it is sent alone. 0, the default
	// here, sends each at once; the HTTP server's default is DefaultReleaseDelay. At most MaxReleaseDelay.
	ReleaseDelay time.Duration
	// StoreTimeout bounds each done the router sends in the background (coalesced ones). Default 5 s.
	StoreTimeout time.Duration
	// Logger receives the background dones' failures. Default slog.Default().
	Logger *slog.Logger
}

// DefaultReleaseDelay is the HTTP server's --release-delay: long enough that a loaded router's next
// route (every 0.1–1 ms at 1–10 k decisions/s) carries nearly every done, short against a request's
// seconds, so the load a pending release still shows to other routers' decisions is negligible.
const DefaultReleaseDelay = 5 * time.Millisecond

// MaxReleaseDelay bounds Options.ReleaseDelay: a pending release is load that other routers still count.
const MaxReleaseDelay = time.Second

// Router is safe for concurrent use. It holds no routing state: a short cache of pool configs and, with
// ReleaseDelay, finished requests' dones for at most that long.
type Router struct {
	store statestore.Store
	opts  Options
	rel   *ReleaseQueue // nil: ReleaseDelay 0

	mu    sync.Mutex
	pools map[string]cachedPool
}

type cachedPool struct {
	cfg     statestore.PoolConfig
	expires time.Time
}

// New returns a Router over a store. It does no I/O.
func New(store statestore.Store, opts Options) *Router {
	if opts.Now == nil {
		opts.Now = func() int64 { return time.Now().UnixMilli() }
	}
	if opts.Random == nil {
		opts.Random = mrand.Float64
	}
	if opts.PoolCacheTTL == 0 {
		opts.PoolCacheTTL = 5 * time.Second
	}
	if opts.StoreTimeout <= 0 {
		opts.StoreTimeout = 5 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Router{store: store, opts: opts, pools: map[string]cachedPool{}}
	if opts.ReleaseDelay > 0 {
		r.rel = NewReleaseQueue(store, opts.ReleaseDelay, opts.StoreTimeout, opts.Now, opts.Logger)
	}
	return r
}

// Store returns the router's state store.
func (r *Router) Store() statestore.Store { return r.store }

// Now returns the router clock's current time in ms.
func (r *Router) Now() int64 { return r.opts.Now() }

func poolName(p string) string {
	if p == "" {
		return DefaultPool
	}
	return p
}

// PoolConfig returns a pool's config, cached for PoolCacheTTL.
func (r *Router) PoolConfig(ctx context.Context, pool string) (statestore.PoolConfig, error) {
	pool = poolName(pool)
	if r.opts.PoolCacheTTL > 0 {
		r.mu.Lock()
		c, ok := r.pools[pool]
		r.mu.Unlock()
		if ok && time.Now().Before(c.expires) {
			return c.cfg, nil
		}
	}
	cfg, err := r.store.GetPool(ctx, pool)
	if err != nil {
		return cfg, err
	}
	if r.opts.PoolCacheTTL > 0 {
		r.mu.Lock()
		r.pools[pool] = cachedPool{cfg: cfg, expires: time.Now().Add(r.opts.PoolCacheTTL)}
		r.mu.Unlock()
	}
	return cfg, nil
}

// PutPool creates or updates a pool.
func (r *Router) PutPool(ctx context.Context, pool string, cfg statestore.PoolConfig) error {
	pool = poolName(pool)
	if err := r.store.PutPool(ctx, pool, cfg); err != nil {
		return err
	}
	r.mu.Lock()
	delete(r.pools, pool)
	r.mu.Unlock()
	return nil
}

// Pools lists pools.
func (r *Router) Pools(ctx context.Context) ([]statestore.PoolInfo, error) { return r.store.Pools(ctx) }

// newRequestID returns 16 random hex characters.
func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// prepare turns a RouteInput into a store request.
func (r *Router) prepare(ctx context.Context, in *RouteInput) (statestore.RouteRequest, error) {
	in.Pool = poolName(in.Pool)
	if in.RequestID == "" {
		in.RequestID = newRequestID()
	}
	cfg, err := r.PoolConfig(ctx, in.Pool)
	if err != nil {
		return statestore.RouteRequest{}, err
	}
	req, err := in.normalize(cfg.BlockSize, cfg.MaxPromptTokens)
	if err != nil {
		return req, err
	}
	req.NowMs = r.opts.Now()
	if in.Random != nil {
		req.Random = *in.Random
	} else {
		req.Random = r.opts.Random()
	}
	return req, nil
}

// Route makes and books one decision.
func (r *Router) Route(ctx context.Context, in RouteInput) (statestore.Decision, error) {
	req, err := r.prepare(ctx, &in)
	if err != nil {
		return statestore.Decision{RequestID: in.RequestID}, err
	}
	var d statestore.Decision
	if r.rel != nil {
		d, err = r.rel.Route(ctx, req) // carrying this router's pending releases of the pool
	} else {
		d, err = r.store.Route(ctx, req)
	}
	if err != nil {
		d.RequestID = in.RequestID
	}
	return d, err
}

// Explain computes what Route would decide, with every candidate; it books nothing.
func (r *Router) Explain(ctx context.Context, in RouteInput) (statestore.Explanation, error) {
	req, err := r.prepare(ctx, &in)
	if err != nil {
		return statestore.Explanation{RequestID: in.RequestID}, err
	}
	return r.store.Explain(ctx, req)
}

// Overlap answers an index query: matched depth per (worker, rank), zeros omitted.
func (r *Router) Overlap(ctx context.Context, pool string, local []uint64) ([]statestore.Score, error) {
	return r.store.Overlap(ctx, poolName(pool), blockhash.Sequence(nil, local), r.opts.Now())
}

// PrefillDone releases a request's prefill load (idempotent); pool "" searches all pools.
func (r *Router) PrefillDone(ctx context.Context, pool, id string) (bool, error) {
	return r.store.PrefillDone(ctx, pool, id, r.opts.Now())
}

// Done ends a request (idempotent); pool "" searches all pools.
func (r *Router) Done(ctx context.Context, pool, id string) (bool, error) {
	return r.store.Done(ctx, pool, id, r.opts.Now())
}

// Release ends a finished request's lease as Done does, but in the background: with ReleaseDelay it waits
// up to that long for the router's next route of the pool to carry it (releases.go), else it is sent at
// once; a failure is logged (the lease's TTL then ends it). The gateway's done.
func (r *Router) Release(pool, id string) {
	pool = poolName(pool)
	if r.rel != nil {
		r.rel.Add(pool, id)
		return
	}
	sendDones(r.store, pool, []string{id}, r.opts.Now, r.opts.StoreTimeout, r.opts.Logger)
}

// FlushReleases sends every pending release now and returns once they are sent (shutdown).
func (r *Router) FlushReleases() {
	if r.rel != nil {
		r.rel.Flush("")
	}
}

// ReportForward records a forward's outcome for the worker's shared health (SPEC §7.2).
func (r *Router) ReportForward(ctx context.Context, pool, workerID string, ok bool) (statestore.WorkerHealth, error) {
	return r.store.ReportForward(ctx, poolName(pool), workerID, ok, r.opts.Now())
}

// RenewLease keeps a running request's lease alive.
func (r *Router) RenewLease(ctx context.Context, pool, id string) (bool, error) {
	return r.store.RenewLease(ctx, pool, id, r.opts.Now())
}

// PutWorker registers or refreshes a worker. A block_size given with the worker must equal the pool's.
func (r *Router) PutWorker(ctx context.Context, pool string, spec statestore.WorkerSpec, blockSize int) error {
	pool = poolName(pool)
	if blockSize != 0 {
		cfg, err := r.PoolConfig(ctx, pool)
		if err != nil {
			return err
		}
		if cfg.BlockSize != blockSize {
			return fmt.Errorf("%w: worker block_size %d differs from pool %q's block_size %d", statestore.ErrInvalid, blockSize, pool, cfg.BlockSize)
		}
	}
	return r.store.PutWorker(ctx, pool, spec, r.opts.Now())
}

// RemoveWorker deregisters a worker.
func (r *Router) RemoveWorker(ctx context.Context, pool, id string) error {
	return r.store.RemoveWorker(ctx, poolName(pool), id, r.opts.Now())
}

// Workers lists all of a pool's workers (page after page: each store call bounded).
// The router's own pending releases are sent first, so its listings show the loads it released.
func (r *Router) Workers(ctx context.Context, pool string) ([]statestore.WorkerInfo, error) {
	r.flushPool(poolName(pool))
	return r.store.Workers(ctx, poolName(pool), r.opts.Now())
}

// ListWorkers returns one page of a pool's workers (GET /v1/workers), after the router's pending releases
// of the pool (as Workers).
func (r *Router) ListWorkers(ctx context.Context, pool string, q statestore.WorkersQuery) (statestore.WorkerPage, error) {
	r.flushPool(poolName(pool))
	return r.store.ListWorkers(ctx, poolName(pool), q, r.opts.Now())
}

// flushPool sends pool's pending releases now (a read of its loads follows).
func (r *Router) flushPool(pool string) {
	if r.rel != nil {
		r.rel.Flush(pool)
	}
}

// EventError is a JSON event that could not be converted; the rest of the input is still applied.
type EventError struct {
	Index int    `json:"index"`
	Error string `json:"error"`
}

// ApplyRouterEvents converts JSON events and applies them in order, as batches of consecutive events of
// the same (pool, worker). Events that fail conversion are reported, not applied.
func (r *Router) ApplyRouterEvents(ctx context.Context, events []RouterEvent) (statestore.ApplyResult, []EventError, error) {
	var total statestore.ApplyResult
	var bad []EventError
	now := r.opts.Now()
	var cur statestore.EventBatch
	flush := func() error {
		if len(cur.Events) == 0 {
			return nil
		}
		res, err := r.store.ApplyEvents(ctx, cur)
		total.Add(res)
		cur.Events = nil
		return err
	}
	for i := range events {
		ev := &events[i]
		pool := poolName(ev.Pool)
		if err := statestore.CheckID("worker_id", string(ev.WorkerID)); err != nil {
			bad = append(bad, EventError{Index: i, Error: err.Error()})
			continue
		}
		cfg, err := r.PoolConfig(ctx, pool)
		if err != nil {
			if errors.Is(err, statestore.ErrUnknownPool) {
				bad = append(bad, EventError{Index: i, Error: err.Error()})
				continue
			}
			return total, bad, err
		}
		se, err := ev.ToStore(cfg.BlockSize)
		if err != nil {
			bad = append(bad, EventError{Index: i, Error: err.Error()})
			continue
		}
		if cur.Pool != pool || cur.WorkerID != string(ev.WorkerID) {
			if err := flush(); err != nil {
				return total, bad, err
			}
			cur = statestore.EventBatch{Pool: pool, WorkerID: string(ev.WorkerID), NowMs: now}
		}
		cur.Events = append(cur.Events, se)
	}
	return total, bad, flush()
}
