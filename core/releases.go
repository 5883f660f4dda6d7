package core

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// Release coalescing (group commit of `done`s). A request that finished leaves its lease's end with the
// router for at most Options.ReleaseDelay; the router's next route of the same pool carries every one
// pending (statestore.RouteRequest.Releases, at most statestore.MaxRouteReleases), ended in that route's
// own atomic call before it decides. With Redis a lone `done` is a round trip and ~15–35 µs of Redis CPU
// (its wake-up, the function call, the pool's knobs), a quarter to a third of a decision's; carried, it is
// ~5 commands inside a call Redis runs anyway (docs/PERFORMANCE.md "Twenty-fifth session"). A route
// never waits for releases: it takes what is pending. What no route took within the delay (an idle pool) is
// sent by a timer with Done, one call per lease, as without coalescing.
//
// The router is still stateless in the sense that matters (SPEC §1): a router that dies loses at most its
// pending releases, whose leases then end by their TTL — as a `done` lost in flight always did.

// maxPendingReleases bounds one pool's queue: past it the queue is sent at once (a flood of finishes with
// no route to carry them).
const maxPendingReleases = 4 * statestore.MaxRouteReleases

// ReleaseQueue is a router's pending releases, per pool (Router with Options.ReleaseDelay; also the
// route benchmark's, so it measures exactly this). Safe for concurrent use.
type ReleaseQueue struct {
	delay time.Duration
	store statestore.Store
	now   func() int64
	// timeout bounds each Done the queue sends itself (a timer's, a flush's).
	timeout time.Duration
	log     *slog.Logger
	// after arms a queue's timer (time.AfterFunc; tests fire their own).
	after func(time.Duration, func()) stopper

	mu    sync.Mutex
	pools map[string]*pendingReleases
}

type pendingReleases struct {
	ids   []string
	timer stopper // armed while ids is not empty
}

// stopper is an armed timer (*time.Timer).
type stopper interface{ Stop() bool }

func afterFunc(d time.Duration, f func()) stopper { return time.AfterFunc(d, f) }

// Add queues request id's release in pool; the first id of an empty queue arms its timer.
func (q *ReleaseQueue) Add(pool, id string) { q.enqueue(pool, []string{id}, false) }

// enqueue adds ids to pool's queue (at its front: ids a route gave back, older than the rest), arming the
// queue's timer if it was empty; a queue grown to maxPendingReleases is sent at once instead.
func (q *ReleaseQueue) enqueue(pool string, ids []string, front bool) {
	q.mu.Lock()
	p := q.pools[pool]
	if p == nil {
		p = &pendingReleases{}
		q.pools[pool] = p
	}
	if front {
		p.ids = append(append([]string(nil), ids...), p.ids...)
	} else {
		p.ids = append(p.ids, ids...)
	}
	var flood []string
	if len(p.ids) >= maxPendingReleases {
		flood = q.detach(pool, p)
	} else if p.timer == nil {
		p.timer = q.after(q.delay, func() { q.expire(pool, p) })
	}
	q.mu.Unlock()
	if flood != nil {
		go q.send(pool, flood)
	}
}

// Route makes req's decision carrying pool's pending releases (take), then settles them by its outcome
// (settle): the router's route (Router.Route) and the route benchmark's (`bench route --release-delay`).
func (q *ReleaseQueue) Route(ctx context.Context, req statestore.RouteRequest) (statestore.Decision, error) {
	req.Releases = q.take(req.Pool)
	d, err := q.store.Route(ctx, req)
	q.settle(req.Pool, req.Releases, err)
	return d, err
}

// take removes and returns up to statestore.MaxRouteReleases of pool's pending ids, oldest first, for a
// route to carry (statestore.RouteRequest.Releases; nil when none).
func (q *ReleaseQueue) take(pool string) []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pools[pool]
	if p == nil {
		return nil
	}
	n := min(len(p.ids), statestore.MaxRouteReleases)
	out := append([]string(nil), p.ids[:n]...)
	if n == len(p.ids) {
		q.detach(pool, p)
	} else {
		p.ids = p.ids[n:]
	}
	return out
}

// settle takes the outcome of a route that carried ids (take). A route that succeeded, found a conflict or
// nothing eligible applied them (statestore.RouteRequest.Releases); after any other error they may not
// have been (or the caller cannot tell), so they go back to the front of pool's queue: Done is idempotent,
// sending one twice is harmless.
func (q *ReleaseQueue) settle(pool string, ids []string, err error) {
	if len(ids) == 0 || err == nil || errors.Is(err, statestore.ErrConflict) || errors.Is(err, statestore.ErrNoEligibleWorker) {
		return
	}
	q.enqueue(pool, ids, true)
}

// detach removes pool's queue (q.mu held), stops its timer and returns its ids.
func (q *ReleaseQueue) detach(pool string, p *pendingReleases) []string {
	if p.timer != nil {
		p.timer.Stop()
	}
	delete(q.pools, pool)
	return p.ids
}

// NewReleaseQueue returns an empty queue over store: releases wait at most delay (at most MaxReleaseDelay;
// it must be > 0) for a route to carry them; each Done it sends itself is bounded by timeout (> 0) and its
// failure logged to log. now is the clock those Done calls take (ms).
func NewReleaseQueue(store statestore.Store, delay, timeout time.Duration, now func() int64, log *slog.Logger) *ReleaseQueue {
	return &ReleaseQueue{delay: min(delay, MaxReleaseDelay), store: store, now: now, timeout: timeout, log: log,
		after: afterFunc, pools: map[string]*pendingReleases{}}
}

// expire is queue p's timer: no route took its releases within the delay; send them alone. A queue taken
// since (and maybe replaced by a newer one, with its own timer) is left alone.
func (q *ReleaseQueue) expire(pool string, p *pendingReleases) {
	q.mu.Lock()
	var ids []string
	if q.pools[pool] == p {
		ids = q.detach(pool, p)
	}
	q.mu.Unlock()
	q.send(pool, ids)
}

// Flush sends pool's pending releases now ("" every pool's), and returns once they are sent.
func (q *ReleaseQueue) Flush(pool string) {
	q.mu.Lock()
	batches := map[string][]string{}
	for name, p := range q.pools {
		if pool == "" || name == pool {
			batches[name] = q.detach(name, p)
		}
	}
	q.mu.Unlock()
	for name, ids := range batches {
		q.send(name, ids)
	}
}

// send ends each lease with Done (sendDones).
func (q *ReleaseQueue) send(pool string, ids []string) {
	sendDones(q.store, pool, ids, q.now, q.timeout, q.log)
}

// sendDones ends each lease of ids with its own Done (now: the clock; timeout bounds each call). The first
// failure drops the rest, logged once: their leases' TTL ends them, as for any lost done — so a flush (a
// listing, shutdown) waits at most one store timeout while the store is unreachable, and nothing retries
// in a loop. Also Router.Release's path without coalescing.
func sendDones(store statestore.Store, pool string, ids []string, now func() int64, timeout time.Duration, log *slog.Logger) {
	for i, id := range ids {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		_, err := store.Done(ctx, pool, id, now())
		cancel()
		if err != nil {
			log.Warn("router: done failed; the lease TTL will release the load", "pool", pool, "request_id", id,
				"dropped", len(ids)-i, "err", err)
			return
		}
	}
}
