package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/eventlog"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// IngestConfig is the whole configuration of `kvrouter ingest`: ZMQ subscribers for a pool's engines
// writing into the store, and an HTTP listener for POST /v1/events, /metrics, /healthz, /readyz and
// /v1/ingest/streams.
type IngestConfig struct {
	// Addr is the HTTP listen address, host:port. Default "127.0.0.1:8081".
	Addr string
	// Store is "memory" or a Redis URL (Config.Store). Default "memory".
	Store string
	// RedisTimeout bounds one Redis command (Config.RedisTimeout). Default 0 = 15 s.
	RedisTimeout time.Duration
	// Engines are the --engine values (ingest.ParseEngines). None: only POST /v1/events feeds the store.
	Engines []string
	// Pool of the engines, created with BlockSize-token blocks if missing. Default "default".
	Pool string
	// BlockSize is the pool's KV block size, tokens (must equal the engines'). Default 16.
	BlockSize int
	// Access: tokens, the non-loopback rule and the metrics address (SPEC §7.3).
	Access
	// RecoverInterval is how often ingest checks that its pool and its engines' workers still exist in
	// the store and registers them again if the store lost them (SPEC §8 "Losing Redis"). Default 1 s.
	RecoverInterval time.Duration
	// QueueSize is each subscriber's decoded-message buffer (count). Default 64.
	QueueSize int
	// MaxMessageBytes bounds one ZMQ message (every frame) read from an engine, bytes
	// (ingest.SubscriberConfig.MaxMessageBytes). Default 0 = 16 MiB.
	MaxMessageBytes int
	// RestartProbeInterval is how often an idle engine's replay socket is asked whether it restarted
	// (ingest.SubscriberConfig.RestartProbeInterval). Default 0 = 10 s; negative disables it.
	RestartProbeInterval time.Duration
	// ShutdownTimeout bounds the HTTP drain and the subscribers' stop. Default 10 s.
	ShutdownTimeout time.Duration
	// LogLevel is debug, info, warn or error. Default info.
	LogLevel string
	// LogOutput receives the (text) log. Default stderr.
	LogOutput io.Writer
	// OnListening, if set, is called with the bound address.
	OnListening func(net.Addr)
	// Capture, if set, receives every engine message as a capture line of an event log (`kvrouter
	// index` reads it; format in package eventlog). Default nil.
	Capture io.Writer
}

const (
	// ingestSetupTimeout bounds registering the pool and workers at startup (a loaded Redis may be slow).
	ingestSetupTimeout = 30 * time.Second
	// ingestAPITimeout bounds one POST /v1/events' store work; large event bodies take longer than a
	// routing call.
	ingestAPITimeout = 10 * time.Second
)

// DefaultIngestConfig returns the defaults.
func DefaultIngestConfig() IngestConfig {
	return IngestConfig{Addr: "127.0.0.1:8081", Store: "memory", Pool: core.DefaultPool, BlockSize: 16, QueueSize: 64, RecoverInterval: DefaultRecoverInterval,
		ShutdownTimeout: 10 * time.Second, LogLevel: "info"}
}

// Validate names the first bad setting (by its flag name).
func (cfg IngestConfig) Validate() error {
	if err := statestore.CheckID("pool", cfg.Pool); err != nil {
		return err
	}
	if cfg.BlockSize < 1 {
		return fmt.Errorf("block-size %d: must be > 0", cfg.BlockSize)
	}
	if cfg.QueueSize < 1 || cfg.ShutdownTimeout <= 0 || cfg.RedisTimeout < 0 || cfg.RecoverInterval <= 0 {
		return fmt.Errorf("queue-size, shutdown-timeout and recover-interval must be > 0, redis-timeout >= 0")
	}
	_, err := ParseLogLevel(cfg.LogLevel)
	return err
}

// RunIngest is `kvrouter ingest`'s lifecycle: it registers the engines' workers (creating the pool if
// missing), subscribes to them, serves HTTP until ctx ends, then drains HTTP and stops the subscribers
// within ShutdownTimeout. Configuration errors start with "invalid configuration".
func RunIngest(ctx context.Context, cfg IngestConfig) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	logger := newLogger(cfg.LogLevel, "text", cfg.LogOutput)
	specs, err := ingest.ParseEngines(cfg.Engines, ingest.EngineOptions{Pool: cfg.Pool, BlockSize: cfg.BlockSize,
		QueueSize: cfg.QueueSize, MaxMessageBytes: cfg.MaxMessageBytes, RestartProbeInterval: cfg.RestartProbeInterval,
		Logger: logger})
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	var capture *eventlog.CaptureWriter
	if cfg.Capture != nil {
		capture = eventlog.NewCaptureWriter(cfg.Capture)
		for i := range specs {
			specs[i].Config.Capture = capture.Hook(specs[i].Config.WorkerID, specs[i].Config.DPRank)
		}
	}

	// A store unreachable or unavailable at startup does not stop the ingest (as serve): it subscribes
	// anyway (its subscribers retry their writes with backoff), is not ready, and its keeper connects the
	// store, then creates the pool if missing and registers the engines' workers. Other errors (a pool
	// of another block size or layout) stop it.
	st, pending, err := statestore.OpenOrDefer(cfg.Store, statestore.OpenOptions{RedisTimeout: cfg.RedisTimeout})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer st.Close()
	rt := core.New(st, core.Options{})
	var mgr *ingest.Manager
	var cause error // why the setup waits for the keeper (nil: done now)
	if pending != nil {
		cause = pending.Err()
	} else {
		sctx, cancel := context.WithTimeout(ctx, ingestSetupTimeout)
		mgr, cause = ingest.Prepare(sctx, st, cfg.Pool, cfg.BlockSize, specs)
		cancel()
		if cause != nil && !errors.Is(cause, statestore.ErrUnavailable) && !errors.Is(cause, context.DeadlineExceeded) {
			return cause
		}
	}
	deferred := cause != nil
	if deferred {
		logger.Warn("state store unavailable at startup: subscribing, not ready until the pool and workers are declared",
			"store", st.Name(), "err", cause)
		if mgr, err = ingest.Subscribe(st, specs); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		ingest.NewCollector(mgr))
	metrics := api.NewMetrics(reg)
	kp := newKeeper(st, []PoolSetup{{Name: cfg.Pool, Config: statestore.DefaultPoolConfig(cfg.BlockSize), IfMissing: true}},
		servedWorkers(mgr, cfg.Pool, specs), reg, logger)
	kp.grace = ingestPoolGrace
	if deferred {
		kp.deferDeclaration(func(c context.Context) error {
			if err := pending.Connect(c); err != nil {
				return err
			}
			if err := ingest.EnsurePool(c, st, cfg.Pool, cfg.BlockSize); err != nil {
				return err
			}
			_, err := ingest.RegisterMissing(c, st, cfg.Pool, ingest.Registrations(specs), time.Now().UnixMilli())
			return err
		})
	}
	kctx, stopKeeper := context.WithCancel(ctx)
	defer stopKeeper()
	go kp.run(kctx, cfg.RecoverInterval, ingestAPITimeout)
	a := api.New(rt, api.Options{Metrics: metrics, Logger: logger, Timeout: ingestAPITimeout, Ready: kp.ready})
	tokens, err := cfg.Access.tokens(cfg.Addr, logger)
	if err != nil {
		return err
	}
	if cfg.MetricsAddr != "" {
		if err := serveMetrics(ctx, cfg.MetricsAddr, reg, logger); err != nil {
			return err
		}
	}
	h := requireTokens(tokens, ingest.NewServiceHandler(ingest.ServiceOptions{Manager: mgr, API: NetHTTPHandler(a),
		Ready: kp.ready, Gatherer: reg, NoMetrics: cfg.MetricsAddr != ""}))

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Addr, err)
	}
	// net/http answers 431 beyond MaxHeaderBytes, like serve.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: DefaultOptions().MaxHeaderBytes}
	mctx, stopMgr := context.WithCancel(context.Background())
	mdone := make(chan struct{})
	go func() {
		defer close(mdone)
		_ = mgr.Run(mctx)
	}()
	sdone := make(chan error, 1)
	go func() { sdone <- srv.Serve(ln) }()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = s.Config.WorkerID
	}
	logger.Info("listening", "addr", ln.Addr().String(), "store", st.Name(), "pool", cfg.Pool,
		"block_size", cfg.BlockSize, "engines", strings.Join(names, ","), "auth_tokens", tokens.Len())
	if cfg.OnListening != nil {
		cfg.OnListening(ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-sdone:
		stopMgr()
		<-mdone
		return fmt.Errorf("http server: %w", err)
	}
	logger.Info("shutting down")
	c, cancel2 := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel2()
	err = srv.Shutdown(c)
	stopMgr() // subscribers finish the store call in progress and return
	select {
	case <-mdone:
	case <-c.Done():
		return errors.New("subscribers did not stop within the shutdown timeout")
	}
	if capture != nil {
		logger.Info("capture", "messages", capture.Lines())
		if cerr := capture.Err(); cerr != nil && err == nil {
			err = cerr
		}
	}
	logger.Info("stopped")
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// NetHTTPHandler serves an api.API over net/http.
func NetHTTPHandler(a *api.API) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.Header().Set("Content-Type", api.ContentType)
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			io.WriteString(w, `{"error":{"code":"too_large","message":"request body too large or unreadable"}}`+"\n")
			return
		}
		q := r.URL.Query()
		resp := a.Do(r.Context(), api.Request{Method: r.Method, RawPath: r.URL.EscapedPath(), Query: q.Get,
			Header: r.Header.Get, Body: body})
		for k, v := range api.HeadersFor(resp.Status) {
			w.Header().Set(k, v)
		}
		w.WriteHeader(resp.Status)
		w.Write(resp.Body)
	})
}
