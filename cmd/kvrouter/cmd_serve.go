package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/server"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer"
)

func init() {
	register(command{name: "serve", summary: "the router: HTTP decision API, events and worker APIs, /metrics (SPEC §7)", run: runServe})
}

// loadTokenizer loads --tokenizer.
func loadTokenizer(path string) (api.Tokenizer, error) {
	t, err := tokenizer.Load(path)
	if err != nil {
		return nil, fmt.Errorf("--tokenizer: %v", err)
	}
	return t, nil
}

// poolKnobFlags are the per-pool knobs settable by flag (SPEC §6.4): flag name = knob name with '_' → '-'.
var poolKnobFlags = []struct {
	knob, kind, help string
}{
	{"block_size", "int", "KV block size in tokens of the pool (must equal the engines'; default 16)"},
	{"overlap_score_credit", "float", "credit per cached device block (default 1.0; 0 = pure load balancing)"},
	{"host_cache_hit_weight", "float", "credit per host-tier block (default 0.75)"},
	{"disk_cache_hit_weight", "float", "credit per disk-tier block (default 0.25)"},
	{"prefill_load_scale", "float", "weight of the prefill term (default 1.0)"},
	{"overlap_score_credit_decay", "float", "decay of credit on workers with queued prefill (default 0)"},
	{"decode_active_request_weight", "float", "cost per active request (default 0)"},
	{"temperature", "float", "softmax sampling temperature, 0 = take the minimum (default 0)"},
	{"busy_prefill_fraction", "float", "busy when active prefill tokens > f * max_num_batched_tokens (default 0 = off)"},
	{"busy_decode_fraction", "float", "busy when active decode blocks > f * total_kv_blocks (default 0 = off)"},
	{"kv_events", "bool", "workers publish KV events (default true; false = approximate mode)"},
	{"approx_ttl_ms", "int", "approximate-mode entry TTL, ms (default 120000)"},
	{"predicted_ttl_ms", "int", "predict-on-route entry TTL, ms (default 0 = off)"},
	{"session_affinity_ttl_ms", "int", "session binding idle TTL, ms (default 0 = affinity off)"},
	{"lease_ttl_ms", "int", "request lease TTL, ms (default 300000)"},
	{"worker_ttl_ms", "int", "worker liveness window, ms (default 0 = live until removed)"},
	{"max_prompt_tokens", "int", "longest accepted prompt, tokens (default 1048576)"},
	{"unhealthy_after", "int", "failed forwards in a row that mark a worker unhealthy for all routers (default 3; 0 = off)"},
	{"unhealthy_backoff_ms", "int", "how long an unhealthy worker is skipped before one request probes it, ms (default 10000; doubles per failed probe, up to 8x)"},
}

func runServe(ctx context.Context, args []string) error {
	fs := newFlagSet("serve", "serve [--config FILE] [--addr HOST:PORT] [--store memory|redis://...] [pool flags...]")
	def := server.DefaultConfig()
	configPath := fs.String("config", "", "optional YAML configuration file (keys = flag names with '_'); flags and KVROUTER_* override it")
	addr := fs.String("addr", def.Addr, "listen address host:port (port 0 picks a free port, logged at startup)")
	storeURL := storeFlag(fs)
	maxBody := fs.Int("max-body-bytes", def.MaxBodyBytes, "largest request body, bytes (413 above)")
	maxEvents := fs.Int("max-events", def.MaxEvents, "most events in one POST /v1/events")
	readTimeout := fs.Duration("read-timeout", def.ReadTimeout, "time to read one request")
	writeTimeout := fs.Duration("write-timeout", def.WriteTimeout, "time to write one response")
	idleTimeout := fs.Duration("idle-timeout", def.IdleTimeout, "idle keep-alive connection lifetime")
	shutdownTimeout := fs.Duration("shutdown-timeout", def.ShutdownTimeout, "drain time for in-flight requests on SIGTERM/SIGINT")
	storeTimeout := fs.Duration("store-timeout", def.StoreTimeout, "bound on one request's state-store work")
	tokPath := fs.String("tokenizer", "", "Hugging Face tokenizer.json (or tiktoken file) to tokenize \"prompt\" text; empty = token ids only")
	otlp := fs.String("otlp-endpoint", "", "OTLP/HTTP trace collector (host:port or URL); empty = tracing off")
	logLevel := fs.String("log-level", def.LogLevel, "debug, info, warn or error (debug logs every decision)")
	logFormat := fs.String("log-format", def.LogFormat, "text or json")
	pool := fs.String("pool", core.DefaultPool, "the pool the pool flags below apply to")
	loadAware := fs.Bool("load-aware", false, "preset: overlap_score_credit 0 (pure load balancing)")
	agentic := fs.Bool("agentic", false, "preset: credit 2, prefill scale 4, request weight 64")
	var engines multiFlag
	fs.Var(&engines, "engine", "subscribe to an engine's vLLM/SGLang ZMQ KV events in-process, into --pool (repeatable; meant for the embedded store — with Redis run `kvrouter ingest` instead): WORKER=tcp://host:port[,replay=tcp://host:port][,dp=N][,url=http://…]")
	knobVals := map[string]*string{}
	for _, k := range poolKnobFlags {
		knobVals[k.knob] = fs.String(strings.ReplaceAll(k.knob, "_", "-"), "", k.help+" ["+k.kind+"]")
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := def
	if *configPath != "" {
		var err error
		if cfg, err = server.LoadConfigFile(*configPath, def); err != nil {
			return err
		}
	}
	overlay := map[string]func(){
		"addr": func() { cfg.Addr = *addr }, "store": func() { cfg.Store = *storeURL },
		"max-body-bytes": func() { cfg.MaxBodyBytes = *maxBody }, "max-events": func() { cfg.MaxEvents = *maxEvents },
		"read-timeout": func() { cfg.ReadTimeout = *readTimeout }, "write-timeout": func() { cfg.WriteTimeout = *writeTimeout },
		"idle-timeout": func() { cfg.IdleTimeout = *idleTimeout }, "shutdown-timeout": func() { cfg.ShutdownTimeout = *shutdownTimeout },
		"store-timeout": func() { cfg.StoreTimeout = *storeTimeout }, "tokenizer": func() { cfg.Tokenizer = *tokPath },
		"otlp-endpoint": func() { cfg.OTLPEndpoint = *otlp }, "log-level": func() { cfg.LogLevel = *logLevel },
		"log-format": func() { cfg.LogFormat = *logFormat },
	}
	for name, apply := range overlay {
		if set[name] {
			apply()
		}
	}
	if *loadAware && *agentic {
		return fmt.Errorf("invalid configuration: --load-aware and --agentic exclude each other")
	}
	if err := statestore.CheckID("--pool", *pool); err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	if *loadAware {
		cfg.SetPoolKnob(*pool, "preset", core.PresetLoadAware)
	}
	if *agentic {
		cfg.SetPoolKnob(*pool, "preset", core.PresetAgentic)
	}
	for _, k := range poolKnobFlags {
		flagName := strings.ReplaceAll(k.knob, "_", "-")
		if !set[flagName] {
			continue
		}
		v, err := parseKnobFlag(k.kind, *knobVals[k.knob])
		if err != nil {
			return fmt.Errorf("invalid configuration: --%s=%q: %v", flagName, *knobVals[k.knob], err)
		}
		cfg.SetPoolKnob(*pool, k.knob, v)
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	return serve(ctx, cfg, engines, *pool)
}

func parseKnobFlag(kind, s string) (any, error) {
	switch kind {
	case "int":
		return strconv.ParseInt(s, 10, 64)
	case "bool":
		return strconv.ParseBool(s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && (math.IsNaN(f) || math.IsInf(f, 0)) {
		return nil, errors.New("must be a finite number")
	}
	return f, err
}

// serve runs the server with a validated configuration until ctx ends; engines (--engine) are subscribed
// to in-process, into enginePool.
func serve(ctx context.Context, cfg server.Config, engines []string, enginePool string) error {
	level, _ := server.ParseLogLevel(cfg.LogLevel)
	hopts := &slog.HandlerOptions{Level: level}
	var logger *slog.Logger
	if cfg.LogFormat == "json" {
		logger = slog.New(slog.NewJSONHandler(os.Stderr, hopts))
	} else {
		logger = slog.New(slog.NewTextHandler(os.Stderr, hopts))
	}
	var tok api.Tokenizer
	if cfg.Tokenizer != "" {
		var err error
		if tok, err = loadTokenizer(cfg.Tokenizer); err != nil {
			return fmt.Errorf("invalid configuration: %v", err)
		}
	}
	pools, _ := cfg.PoolConfigs()

	st, err := openStore(ctx, cfg.Store, storeOptions{})
	if err != nil {
		return err
	}
	defer st.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := api.NewMetrics(reg)
	st = api.InstrumentStore(st, metrics)
	rt := core.New(st, core.Options{})
	reg.MustRegister(api.NewWorkerCollector(rt, cfg.StoreTimeout))

	sctx, cancel := context.WithTimeout(ctx, 2*cfg.StoreTimeout)
	err = setupPools(sctx, rt, pools)
	cancel()
	if err != nil {
		return err
	}

	if len(engines) > 0 {
		sctx, cancel := context.WithTimeout(ctx, 2*cfg.StoreTimeout)
		pc, err := rt.PoolConfig(sctx, enginePool)
		if err != nil {
			cancel()
			return fmt.Errorf("--engine: pool %q: %w", enginePool, err)
		}
		specs, err := parseEngineSpecs(engines, enginePool, pc.BlockSize, 64, logger)
		if err != nil {
			cancel()
			return err
		}
		mgr, err := startIngest(sctx, rt, st, enginePool, pc.BlockSize, specs)
		cancel()
		if err != nil {
			return err
		}
		reg.MustRegister(ingest.NewCollector(mgr))
		mctx, stopMgr := context.WithCancel(context.Background())
		mdone := make(chan struct{})
		go func() {
			defer close(mdone)
			_ = mgr.Run(mctx)
		}()
		defer func() { stopMgr(); <-mdone }() // after the HTTP server drained
	}

	tp, shutdownTracing, err := server.Tracing(ctx, cfg.OTLPEndpoint, "kvrouter")
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	defer func() {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = shutdownTracing(c)
	}()
	a := api.New(rt, api.Options{Tokenizer: tok, Metrics: metrics, Tracer: tp.Tracer("github.com/kvrouter/kvrouter/server"),
		Logger: logger, MaxEvents: cfg.MaxEvents, Timeout: cfg.StoreTimeout})
	opts := cfg.ServerOptions()
	opts.Gatherer, opts.Logger = reg, logger
	srv, err := server.New(a, opts)
	if err != nil {
		return fmt.Errorf("invalid configuration: %v", err)
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("--addr %s: %w", cfg.Addr, err)
	}
	names := make([]string, len(pools))
	for i, p := range pools {
		names[i] = p.Name
	}
	logger.Info("listening", "addr", ln.Addr().String(), "store", st.Name(), "pools", strings.Join(names, ","),
		"tracing", cfg.OTLPEndpoint != "", "tokenizer", cfg.Tokenizer)
	err = srv.Serve(ctx, ln)
	logger.Info("stopped", "err", err)
	return err
}

// setupPools creates the configured pools (the implicit default pool only if missing).
func setupPools(ctx context.Context, rt *core.Router, pools []server.PoolSetup) error {
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
