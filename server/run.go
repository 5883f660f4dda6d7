package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// engineQueueSize is the QueueSize (decoded messages) of each in-process --engine subscriber.
const engineQueueSize = 64

// tracingShutdownTimeout bounds flushing the last spans on exit.
const tracingShutdownTimeout = 5 * time.Second

// Run is `kvrouter serve`'s whole lifecycle: it validates cfg, opens the store, declares the pools,
// subscribes to cfg.Engines in-process, sets up metrics and tracing, listens on cfg.Addr and serves
// until ctx ends; then it drains in-flight requests (ShutdownTimeout), stops the subscribers, flushes
// traces and closes the store. It returns nil after a clean shutdown. Configuration errors start with
// "invalid configuration".
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	logger := cfg.logger()
	var tok api.Tokenizer
	if cfg.Tokenizer != "" {
		t, err := tokenizer.Load(cfg.Tokenizer)
		if err != nil {
			return fmt.Errorf("invalid configuration: tokenizer: %v", err)
		}
		tok = t
	}
	pools, _ := cfg.PoolConfigs() // validated above

	// A Redis that cannot be reached at startup (down, restarting, a failover or a DNS record not there
	// yet) does not stop the router either: it serves through a statestore.Deferred, not ready and
	// answering 503 store_unavailable, and the keeper connects it, then declares the pools (below).
	st, pending, err := statestore.OpenOrDefer(cfg.Store, statestore.OpenOptions{RedisTimeout: cfg.RedisTimeout, Limits: cfg.limits()})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if pending != nil {
		logger.Warn("state store unreachable at startup: serving, not ready until it connects", "store", st.Name(), "err", pending.Err())
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := api.NewMetrics(reg)
	st = api.InstrumentStore(st, metrics)
	rt := core.New(st, core.Options{ReleaseDelay: cfg.ReleaseDelay, StoreTimeout: cfg.StoreTimeout, Logger: logger})
	reg.MustRegister(api.NewWorkerCollector(rt, cfg.StoreTimeout, cfg.MetricsMaxWorkers))

	// The pools are declared before serving. A store unavailable at startup (Redis restarting, a failover,
	// a slow FUNCTION LOAD on a loaded node) does not stop the router: it serves, not ready (503
	// store_unavailable until then), and its keeper retries the declaration every RecoverInterval. Any
	// other error (a pool of another layout, a conflict) stops it.
	deferred := pending != nil // (a store not connected yet: the keeper connects it first)
	if !deferred {
		sctx, cancel := context.WithTimeout(ctx, 2*cfg.StoreTimeout)
		err := declarePools(sctx, rt, pools)
		cancel()
		if err != nil {
			if !errors.Is(err, statestore.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			deferred = true
			logger.Warn("state store unavailable at startup: serving, not ready until the pools are declared", "store", st.Name(), "err", err)
		}
	}
	kept := pools
	var engineWorkers func() map[string][]statestore.WorkerSpec
	var eng engines
	if len(cfg.Engines) > 0 {
		if eng, err = runEngines(ctx, cfg, rt, reg, logger, pools, deferred); err != nil {
			return err
		}
		defer eng.stop() // after the HTTP server drained
		kept, engineWorkers = withPool(pools, eng.pool), eng.workers
	}
	kp := newKeeper(rt.Store(), kept, engineWorkers, reg, logger)
	if deferred {
		kp.deferDeclaration(func(c context.Context) error {
			if err := pending.Connect(c); err != nil {
				return err
			}
			if err := declarePools(c, rt, pools); err != nil {
				return err
			}
			return eng.checkBlockSize(c, rt)
		})
	} else if eng.unchecked {
		kp.deferDeclaration(func(c context.Context) error { return eng.checkBlockSize(c, rt) })
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	defer stopKeeper()
	go kp.run(kctx, cfg.RecoverInterval, cfg.StoreTimeout)

	tp, shutdownTracing, err := Tracing(ctx, cfg.OTLPEndpoint, "kvrouter")
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), tracingShutdownTimeout)
		defer cancel()
		_ = shutdownTracing(c)
	}()
	tokens, err := cfg.Access.tokens(cfg.Addr, logger)
	if err != nil {
		return err
	}
	a := api.New(rt, api.Options{Auth: tokens, Tokenizer: tok, Metrics: metrics, Tracer: tp.Tracer("github.com/kvrouter/kvrouter/server"),
		Logger: logger, MaxEvents: cfg.MaxEvents, Timeout: cfg.StoreTimeout, Ready: kp.ready})
	gopts := cfg.GatewayOptions()
	gopts.Metrics, gopts.Logger, gopts.Authorize = gateway.NewMetrics(reg), logger, tokens.Authorizer(api.ScopeRoute)
	gw, err := gateway.New(rt, gopts)
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	opts := cfg.ServerOptions()
	opts.Gatherer, opts.Logger, opts.Gateway = reg, logger, gw
	if cfg.MetricsAddr != "" {
		opts.Gatherer = nil // not on the main address
		if err := serveMetrics(ctx, cfg.MetricsAddr, reg, logger); err != nil {
			return err
		}
	}
	srv, err := New(a, opts)
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
	}
	// Tests and the integration harness read the port from this line ("listening addr=…").
	logger.Info("listening", "addr", ln.Addr().String(), "store", st.Name(), "pools", strings.Join(names, ","),
		"tracing", cfg.OTLPEndpoint != "", "tokenizer", cfg.Tokenizer, "auth_tokens", tokens.Len())
	if cfg.OnListening != nil {
		cfg.OnListening(ln.Addr())
	}
	err = srv.Serve(ctx, ln)
	rt.FlushReleases() // the drained requests' coalesced dones, before the store closes
	logger.Info("stopped", "err", err)
	return err
}

// logger builds the configured logger on LogOutput (default stderr).
func (c Config) logger() *slog.Logger { return newLogger(c.LogLevel, c.LogFormat, c.LogOutput) }

// newLogger returns a text or json logger at a level (validated by the caller) on w (nil: stderr).
func newLogger(level, format string, w io.Writer) *slog.Logger {
	lvl, _ := ParseLogLevel(level)
	hopts := &slog.HandlerOptions{Level: lvl}
	if w == nil {
		w = os.Stderr
	}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, hopts))
	}
	return slog.New(slog.NewTextHandler(w, hopts))
}

// declarePools creates the configured pools (the implicit default pool only if missing).
func declarePools(ctx context.Context, rt *core.Router, pools []PoolSetup) error {
	for _, p := range pools {
		if p.IfMissing {
			_, err := rt.Store().GetPool(ctx, p.Name)
			if err == nil {
				continue
			}
			if !errors.Is(err, statestore.ErrUnknownPool) {
				return fmt.Errorf("pool %q: %w", p.Name, err)
			}
		}
		if err := rt.PutPool(ctx, p.Name, p.Config); err != nil {
			return fmt.Errorf("pool %q: %w", p.Name, err)
		}
	}
	return nil
}

// engines is the in-process ingest of serve's --engine values.
type engines struct {
	pool PoolSetup // the engines' pool (as created if missing)
	// workers returns the engines' worker registrations still served (streams removed are dropped).
	workers func() map[string][]statestore.WorkerSpec
	stop    func() // stops the subscribers and waits for them
	// unchecked: subscribed with the configured block size because the store did not answer (so
	// checkBlockSize must pass before the router is ready).
	unchecked bool
}

// runEngines subscribes to cfg.Engines in-process, into cfg.EnginePool, with the pool's block size as the
// store has it. When the store is not available (deferred: serve started while Redis was unreachable or
// unavailable) it makes no store call: the subscribers use the block size configured for the pool (a
// subscriber retries its writes with backoff, so its events land once the keeper has connected the
// store, declared the pool and registered the workers), and checkBlockSize then refuses readiness if
// the store's pool turns out to have another one.
func runEngines(ctx context.Context, cfg Config, rt *core.Router, reg *prometheus.Registry, logger *slog.Logger,
	pools []PoolSetup, deferred bool) (engines, error) {
	pool := cfg.enginePool()
	blockSize := 0
	if !deferred {
		sctx, cancel := context.WithTimeout(ctx, 2*cfg.StoreTimeout)
		defer cancel()
		pc, err := rt.PoolConfig(sctx, pool)
		switch {
		case err == nil:
			blockSize = pc.BlockSize
		case errors.Is(err, statestore.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded):
			deferred = true // Redis went away since the pools were declared: as if it never answered
			logger.Warn("state store unavailable while subscribing the engines: subscribing with the configured block size",
				"pool", pool, "err", err)
		default:
			return engines{}, fmt.Errorf("engine: pool %q: %w", pool, err)
		}
	}
	if deferred {
		i := slices.IndexFunc(pools, func(p PoolSetup) bool { return p.Name == pool })
		if i < 0 {
			return engines{}, fmt.Errorf("invalid configuration: engine pool %q is not a configured pool", pool)
		}
		blockSize = pools[i].Config.BlockSize
	}
	specs, err := ingest.ParseEngines(cfg.Engines, ingest.EngineOptions{Pool: pool, BlockSize: blockSize, QueueSize: engineQueueSize, Logger: logger})
	if err != nil {
		return engines{}, fmt.Errorf("invalid configuration: %v", err)
	}
	var mgr *ingest.Manager
	if deferred {
		mgr, err = ingest.Subscribe(rt.Store(), specs)
	} else {
		sctx, cancel := context.WithTimeout(ctx, 2*cfg.StoreTimeout)
		mgr, err = ingest.Prepare(sctx, rt.Store(), pool, blockSize, specs)
		cancel()
	}
	if err != nil {
		return engines{}, fmt.Errorf("engine: %w", err)
	}
	reg.MustRegister(ingest.NewCollector(mgr))
	mctx, stopMgr := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mgr.Run(mctx)
	}()
	return engines{
		pool:      PoolSetup{Name: pool, Config: statestore.DefaultPoolConfig(blockSize), IfMissing: true},
		workers:   servedWorkers(mgr, pool, specs),
		stop:      func() { stopMgr(); <-done },
		unchecked: deferred,
	}, nil
}

// checkBlockSize verifies, once the store answers, that the engines' pool has the block size their
// subscribers were started with (the configured one, when serve started without the store); a pool
// created earlier with another block size would reject every event (block_size_mismatch). Nil when
// there are no engines.
func (e engines) checkBlockSize(ctx context.Context, rt *core.Router) error {
	if e.stop == nil {
		return nil
	}
	pc, err := rt.PoolConfig(ctx, e.pool.Name)
	if err != nil {
		return fmt.Errorf("engine pool %q: %w", e.pool.Name, err)
	}
	if pc.BlockSize != e.pool.Config.BlockSize {
		return fmt.Errorf("engine pool %q has block_size %d in the store, but its engines were subscribed with the configured %d: "+
			"configure the pool's block_size to %d and restart", e.pool.Name, pc.BlockSize, e.pool.Config.BlockSize, pc.BlockSize)
	}
	return nil
}

// servedWorkers returns the registrations of specs whose worker still has a stream in mgr, by pool.
func servedWorkers(mgr *ingest.Manager, pool string, specs []ingest.Engine) func() map[string][]statestore.WorkerSpec {
	regs := ingest.Registrations(specs)
	return func() map[string][]statestore.WorkerSpec {
		live := map[string]bool{}
		for _, k := range mgr.Keys() {
			if k.Pool == pool {
				live[k.WorkerID] = true
			}
		}
		var out []statestore.WorkerSpec
		for _, r := range regs {
			if live[r.WorkerID] {
				out = append(out, r)
			}
		}
		return map[string][]statestore.WorkerSpec{pool: out}
	}
}

// withPool returns pools plus p unless a pool of that name is already there.
func withPool(pools []PoolSetup, p PoolSetup) []PoolSetup {
	for _, q := range pools {
		if q.Name == p.Name {
			return pools
		}
	}
	return append(slices.Clip(pools), p)
}
