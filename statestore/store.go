package statestore

import "context"

// Store is kvrouter's shared state. Every method is one atomic operation on one pool: in Redis, one
// script call on the pool's hash-tagged keys; in memory, one critical section under the pool's lock.
// nowMs arguments are milliseconds on the caller's clock (wall clock, or a replay's virtual clock).
type Store interface {
	// Name identifies the store in errors and logs ("memory", "redis://host:port").
	Name() string
	// Ping checks the store is reachable (readiness).
	Ping(ctx context.Context) error
	// Close releases connections.
	Close() error

	// PutPool creates or updates a pool. Changing block_size while workers are registered is ErrConflict.
	PutPool(ctx context.Context, pool string, cfg PoolConfig) error
	// GetPool returns a pool's config, or ErrUnknownPool.
	GetPool(ctx context.Context, pool string) (PoolConfig, error)
	// Pools lists every pool, sorted by name.
	Pools(ctx context.Context) ([]PoolInfo, error)

	// PutWorker registers a worker or refreshes it (a heartbeat); its index and loads are kept.
	PutWorker(ctx context.Context, pool string, spec WorkerSpec, nowMs int64) error
	// RemoveWorker deregisters a worker: it stops counting at once for routing and for queries; its index
	// memory is reclaimed incrementally. Unknown worker: ErrUnknownWorker.
	RemoveWorker(ctx context.Context, pool, workerID string, nowMs int64) error
	// ListWorkers returns one page of a pool's workers sorted by id, with loads per rank (expired leases
	// released first): one bounded atomic operation (at most MaxWorkersPage workers).
	ListWorkers(ctx context.Context, pool string, q WorkersQuery, nowMs int64) (WorkerPage, error)
	// Workers lists all of a pool's workers sorted by id: ListWorkers page after page (each page atomic,
	// the whole list not one snapshot: a worker registered or removed meanwhile may or may not appear).
	Workers(ctx context.Context, pool string, nowMs int64) ([]WorkerInfo, error)

	// ApplyEvents applies one worker's events in order, exactly once per (worker, dp_rank, event id).
	ApplyEvents(ctx context.Context, batch EventBatch) (ApplyResult, error)

	// Route makes one decision (filter, overlap, cost, pick) and books it (load, lease, session,
	// approximate/predicted entries) atomically.
	Route(ctx context.Context, req RouteRequest) (Decision, error)
	// Explain computes what Route would decide, with every candidate, and books nothing.
	Explain(ctx context.Context, req RouteRequest) (Explanation, error)
	// Overlap returns the matched prefix depth (max of event and approximate/predicted overlap) of every
	// registered (worker, dp_rank) with a non-zero overlap, sorted by worker then rank.
	Overlap(ctx context.Context, pool string, seqHashes []uint64, nowMs int64) ([]Score, error)

	// PrefillDone releases a request's prefill tokens (idempotent). pool "" searches every pool.
	// It reports whether the lease existed.
	PrefillDone(ctx context.Context, pool, requestID string, nowMs int64) (bool, error)
	// Done releases a request's whole lease (idempotent). pool "" searches every pool.
	Done(ctx context.Context, pool, requestID string, nowMs int64) (bool, error)
	// ReportForward records the outcome of forwarding a request to a worker (SPEC §7.2): ok resets its
	// consecutive-failure count; a failure counts, and the pool's unhealthy_after-th failure in a row
	// marks the worker unhealthy for a back-off window shared by every router. Unknown worker:
	// ErrUnknownWorker.
	ReportForward(ctx context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error)
	// RenewLease extends a live lease to nowMs + lease_ttl_ms (a stream still running).
	RenewLease(ctx context.Context, pool, requestID string, nowMs int64) (bool, error)
}

// workerLister is the paging half of Store's listing (ListWorkers).
type workerLister interface {
	ListWorkers(ctx context.Context, pool string, q WorkersQuery, nowMs int64) (WorkerPage, error)
}

// AllWorkers lists every worker of a pool by pages of DefaultWorkersPage (Store.Workers of both stores):
// each store call stays short (at least ceil(W / 32) calls, more when workers have over 2 ranks: the
// MaxWorkersPageRanks bound); the caller holds O(W) in memory.
func AllWorkers(ctx context.Context, s workerLister, pool string, nowMs int64) ([]WorkerInfo, error) {
	var out []WorkerInfo
	q := WorkersQuery{}
	for {
		pg, err := s.ListWorkers(ctx, pool, q, nowMs)
		if err != nil {
			return nil, err
		}
		out = append(out, pg.Workers...)
		if pg.Next == "" {
			return out, nil
		}
		q.After = pg.Next
	}
}
