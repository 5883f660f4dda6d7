package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/statestore"
)

// DefaultRecoverInterval is how often a router or ingest checks that the pools (and, for ingest, the
// workers) it declared still exist in the store, and re-declares them if the store lost them (SPEC §8
// "Losing Redis": a restart without persistence, a failover to an empty replica).
const DefaultRecoverInterval = time.Second

// ingestPoolGrace is how long ingest leaves a missing pool to the routers (which re-declare it with its
// configured knobs) before creating it with default knobs itself.
const ingestPoolGrace = 5 * time.Second

// keeper keeps what this process declared present in the store: its configured pools and, for an
// ingest, the workers of its engines. A missing pool is re-created with its configured knobs (knobs
// changed over the API since are lost with the store); a missing worker is registered again (its
// index refills from new events). It is also the process's readiness check. Safe for concurrent use.
type keeper struct {
	st    statestore.Store
	pools []PoolSetup
	// workers returns the workers to keep registered, per pool (nil: none). Called on every check, so
	// it reflects streams added or removed at run time.
	workers func() map[string][]statestore.WorkerSpec
	log     *slog.Logger
	// grace is how long a pool must have been missing before this keeper re-creates it. Ingest waits
	// (ingestPoolGrace) so that a router, which holds the pool's real knobs (models, tokenizer…),
	// re-declares it first; routers use 0.
	grace time.Duration
	// mu serialises checks (the run loop and readiness probes); missingSince: when each pool was first
	// seen missing.
	mu           sync.Mutex
	missingSince map[string]time.Time
	// redeclared counts re-created pools and re-registered workers (label kind: pool, worker).
	redeclared *prometheus.CounterVec
	// declare, when set, is the startup declaration of the pools that failed because the store was
	// unavailable: each check runs it first, and the process is not ready until it has succeeded (a pool
	// that exists with other knobs must not serve before the configured ones are written). Under mu.
	declare func(context.Context) error
}

// deferDeclaration makes the keeper run declare (the startup declaration the store was unavailable for)
// at its next checks until it succeeds; until then the process is not ready.
func (k *keeper) deferDeclaration(declare func(context.Context) error) {
	k.mu.Lock()
	k.declare = declare
	k.mu.Unlock()
}

// newKeeper returns a keeper; reg (may be nil) gets its counter kvrouter_store_redeclared_total.
func newKeeper(st statestore.Store, pools []PoolSetup, workers func() map[string][]statestore.WorkerSpec,
	reg prometheus.Registerer, log *slog.Logger) *keeper {
	k := &keeper{st: st, pools: pools, workers: workers, log: log, missingSince: map[string]time.Time{},
		redeclared: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_store_redeclared_total",
			Help: "Pools re-created and workers re-registered after the state store lost them (restart without persistence, failover to an empty replica)."},
			[]string{"kind"})}
	if reg != nil {
		reg.MustRegister(k.redeclared)
	}
	return k
}

// run checks every interval until ctx ends. A failed check (store unreachable) is retried at the next tick.
func (k *keeper) run(ctx context.Context, interval, timeout time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := context.WithTimeout(ctx, timeout)
		if err := k.check(c); err != nil && ctx.Err() == nil {
			// The store being away is what this loop waits out (debug); anything else, a pool of another
			// block size or layout met once Redis answers say, will not pass by itself: said loudly.
			if errors.Is(err, statestore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
				k.log.Debug("store recovery check failed", "err", err)
			} else {
				k.log.Error("store recovery check failed; not ready until it passes", "err", err)
			}
		}
		cancel()
	}
}

// check re-creates each missing pool (once missing for the grace period), then registers each missing
// worker (or one with fewer dp ranks than its engines need) of the pools that exist.
func (k *keeper) check(ctx context.Context) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.declare != nil {
		if err := k.declare(ctx); err != nil {
			return fmt.Errorf("declaring the configured pools: %w", err)
		}
		k.declare = nil
		k.log.Info("configured pools declared: the state store answers again", "store", k.st.Name())
	}
	absent := map[string]bool{}
	for _, p := range k.pools {
		_, err := k.st.GetPool(ctx, p.Name)
		if err == nil {
			delete(k.missingSince, p.Name)
			continue
		}
		if !errors.Is(err, statestore.ErrUnknownPool) {
			return fmt.Errorf("pool %q: %w", p.Name, err)
		}
		since, seen := k.missingSince[p.Name]
		if !seen {
			since = time.Now()
			k.missingSince[p.Name] = since
		}
		if time.Since(since) < k.grace {
			absent[p.Name] = true
			continue
		}
		delete(k.missingSince, p.Name)
		if err := k.st.PutPool(ctx, p.Name, p.Config); err != nil {
			return fmt.Errorf("re-declare pool %q: %w", p.Name, err)
		}
		k.redeclared.WithLabelValues("pool").Inc()
		k.log.Warn("pool missing from the state store (emptied or failed over?): re-declared from the configuration",
			"pool", p.Name, "store", k.st.Name())
	}
	if k.workers == nil {
		return nil
	}
	now := time.Now().UnixMilli()
	for pool, specs := range k.workers() {
		if absent[pool] {
			continue
		}
		ids, err := ingest.RegisterMissing(ctx, k.st, pool, specs, now)
		for _, id := range ids {
			k.redeclared.WithLabelValues("worker").Inc()
			k.log.Warn("worker missing from the state store: registered again", "pool", pool, "worker", id)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ready is the readiness check: the store answers (not LOADING, not unreachable) and every configured
// pool exists. A router (no grace period) re-declares a missing pool at once here rather than waiting
// for the next tick, so a probe right after Redis came back sees it ready as soon as it can be.
func (k *keeper) ready(ctx context.Context) error {
	if err := k.st.Ping(ctx); err != nil {
		return err
	}
	if k.grace == 0 {
		if err := k.check(ctx); err != nil {
			return err
		}
	}
	k.mu.Lock()
	pending := k.declare != nil
	k.mu.Unlock()
	if pending {
		return errors.New("the configured pools are not declared yet (the state store was unavailable at startup)")
	}
	for _, p := range k.pools {
		if _, err := k.st.GetPool(ctx, p.Name); err != nil {
			if errors.Is(err, statestore.ErrUnknownPool) {
				return fmt.Errorf("configured pool %q is missing from the store (being re-declared)", p.Name)
			}
			return fmt.Errorf("pool %q: %w", p.Name, err)
		}
	}
	return nil
}
