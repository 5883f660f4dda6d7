package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"strings"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/server"
	"github.com/kvrouter/kvrouter/statestore"
)

func init() {
	register(command{name: "serve", summary: "the router: OpenAI-compatible gateway, HTTP decision API, events and worker APIs, /metrics (SPEC §7)", run: runServe})
}

// poolKnobFlags are the per-pool knobs settable by flag (SPEC §6.4): every knob of statestore's knob
// table, then the gateway settings. Flag name = knob name with '_' → '-'.
var poolKnobFlags = func() []poolKnobFlag {
	kinds := map[statestore.KnobKind]string{statestore.KnobInt: "int", statestore.KnobFloat: "float", statestore.KnobBool: "bool", statestore.KnobEnum: "string"}
	var out []poolKnobFlag
	for _, k := range statestore.Knobs() {
		help := k.Describe()
		if k.Name == "block_size" {
			help += fmt.Sprintf(" (default %d)", server.DefaultBlockSize)
		}
		out = append(out, poolKnobFlag{k.Name, kinds[k.Kind], help})
	}
	return append(out,
		poolKnobFlag{"models", "list", "gateway: comma-separated model names the pool serves (a request's \"model\" picks the pool; default none)"},
		poolKnobFlag{"tokenize", "string", "gateway: how prompts become token ids: local (the pool's tokenizer), engine (a worker's /tokenize) or none (load-only routing); default local with a tokenizer, else none"},
		poolKnobFlag{"image_token_id", "int", "gateway: the token id an image expands to in the engines' prompts (with tokenize engine, images' spans are runs of it and their identity is folded into block hashes; default 0 = images route by load only)"})
}()

type poolKnobFlag struct{ knob, kind, help string }

func runServe(ctx context.Context, args []string) error {
	cfg, err := serveConfig(args)
	if err != nil {
		return err
	}
	return server.Run(ctx, cfg)
}

// serveConfig turns serve's command line (and KVROUTER_* variables, and the --config file) into a
// validated server.Config.
func serveConfig(args []string) (server.Config, error) {
	fs := newFlagSet("serve", "serve [--config FILE] [--addr HOST:PORT] [--store memory|redis://...] [pool flags...]")
	def := server.DefaultConfig()
	configPath := fs.String("config", "", "optional YAML configuration file (keys = flag names with '_'); flags and KVROUTER_* override it")
	addr := fs.String("addr", def.Addr, "listen address host:port (port 0 picks a free port, logged at startup)")
	storeURL := storeFlag(fs)
	redisTimeout := fs.Duration("redis-timeout", 0, "bound on one Redis command's write and reply (0 = 15s)")
	maxBody := fs.Int("max-body-bytes", def.MaxBodyBytes, "largest request body, bytes (413 above)")
	maxEvents := fs.Int("max-events", def.MaxEvents, "most events in one POST /v1/events")
	readTimeout := fs.Duration("read-timeout", def.ReadTimeout, "time to read one request")
	writeTimeout := fs.Duration("write-timeout", def.WriteTimeout, "time to write one response (a streamed gateway answer: each chunk, no whole-stream bound)")
	idleTimeout := fs.Duration("idle-timeout", def.IdleTimeout, "idle keep-alive connection lifetime")
	shutdownTimeout := fs.Duration("shutdown-timeout", def.ShutdownTimeout, "drain time for in-flight requests on SIGTERM/SIGINT")
	storeTimeout := fs.Duration("store-timeout", def.StoreTimeout, "bound on one request's state-store work")
	releaseDelay := fs.Duration("release-delay", def.ReleaseDelay, "how long the gateway's done of a finished request may wait to ride on this router's next route of its pool (one store call per decision instead of two under load); 0 = send each at once, at most 1s")
	tokPath := fs.String("tokenizer", "", "Hugging Face tokenizer.json (or tiktoken file) to tokenize \"prompt\" text; empty = token ids only")
	otlp := fs.String("otlp-endpoint", "", "OTLP/HTTP trace collector (host:port or URL); empty = tracing off")
	logLevel := fs.String("log-level", def.LogLevel, "debug, info, warn or error (debug logs every decision)")
	logFormat := fs.String("log-format", def.LogFormat, "text or json")
	proxyRetries := fs.Int("proxy-retries", def.ProxyRetries, "gateway: route again after a connect failure or a 429/503 before any byte reached the client, at most this many times")
	proxyIdle := fs.Duration("proxy-idle-timeout", def.ProxyIdleTimeout, "gateway: longest wait on a worker with no byte moving (response head, each stream chunk, a whole non-streaming answer); no whole-stream timeout")
	proxyConnect := fs.Duration("proxy-connect-timeout", def.ProxyConnectTimeout, "gateway: bound on dialling a worker or waiting for a free pooled connection (then retried elsewhere)")
	proxyConns := fs.Int("proxy-max-conns-per-worker", def.ProxyMaxConnsPerWorker, "gateway: most pooled connections to one worker")
	maxPools := fs.Int("max-pools", def.MaxPools, "most pools the store may hold; creating more answers 409")
	maxWorkers := fs.Int("max-workers", def.MaxWorkers, "most workers per pool (at most 4096); registering more answers 409")
	metricsMaxWorkers := fs.Int("metrics-max-workers", def.MetricsMaxWorkers, "per-worker /metrics series (kvrouter_worker_*) for at most this many workers per pool, the first by id (0 = none, at most 4096); kvrouter_pool_* sums always cover all")
	pool := fs.String("pool", core.DefaultPool, "the pool the pool flags below and --engine apply to")
	loadAware := fs.Bool("load-aware", false, "preset: overlap_score_credit 0 (pure load balancing)")
	agentic := fs.Bool("agentic", false, "preset: credit 2, prefill scale 4, request weight 64")
	var engines multiFlag
	fs.Var(&engines, "engine", "subscribe in-process to an engine's vLLM/SGLang ZMQ KV events, into --pool; meant for the embedded store (with Redis run the ingest command instead). "+engineFlagHelp)
	knobs := poolKnobs(fs)
	applyAccess := accessFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return server.Config{}, err
	}
	if fs.NArg() > 0 {
		return server.Config{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := def
	if *configPath != "" {
		var err error
		if cfg, err = server.LoadConfigFile(*configPath, def); err != nil {
			return cfg, err
		}
	}
	overlay := map[string]func(){
		"addr": func() { cfg.Addr = *addr }, "store": func() { cfg.Store = *storeURL },
		"redis-timeout":  func() { cfg.RedisTimeout = *redisTimeout },
		"max-body-bytes": func() { cfg.MaxBodyBytes = *maxBody }, "max-events": func() { cfg.MaxEvents = *maxEvents },
		"read-timeout": func() { cfg.ReadTimeout = *readTimeout }, "write-timeout": func() { cfg.WriteTimeout = *writeTimeout },
		"idle-timeout": func() { cfg.IdleTimeout = *idleTimeout }, "shutdown-timeout": func() { cfg.ShutdownTimeout = *shutdownTimeout },
		"store-timeout": func() { cfg.StoreTimeout = *storeTimeout }, "release-delay": func() { cfg.ReleaseDelay = *releaseDelay }, "tokenizer": func() { cfg.Tokenizer = *tokPath },
		"otlp-endpoint": func() { cfg.OTLPEndpoint = *otlp }, "log-level": func() { cfg.LogLevel = *logLevel },
		"log-format": func() { cfg.LogFormat = *logFormat }, "engine": func() { cfg.Engines = engines },
		"pool":      func() { cfg.EnginePool = *pool },
		"max-pools": func() { cfg.MaxPools = *maxPools }, "max-workers": func() { cfg.MaxWorkers = *maxWorkers },
		"metrics-max-workers": func() { cfg.MetricsMaxWorkers = *metricsMaxWorkers },
		"proxy-retries":       func() { cfg.ProxyRetries = *proxyRetries }, "proxy-idle-timeout": func() { cfg.ProxyIdleTimeout = *proxyIdle },
		"proxy-connect-timeout":      func() { cfg.ProxyConnectTimeout = *proxyConnect },
		"proxy-max-conns-per-worker": func() { cfg.ProxyMaxConnsPerWorker = *proxyConns },
	}
	for name, apply := range overlay {
		if set[name] {
			apply()
		}
	}
	applyAccess(&cfg.Access, set)
	if *loadAware && *agentic {
		return cfg, fmt.Errorf("invalid configuration: --load-aware and --agentic exclude each other")
	}
	if err := statestore.CheckID("--pool", *pool); err != nil {
		return cfg, fmt.Errorf("invalid configuration: %v", err)
	}
	if *loadAware {
		cfg.SetPoolKnob(*pool, "preset", core.PresetLoadAware)
	}
	if *agentic {
		cfg.SetPoolKnob(*pool, "preset", core.PresetAgentic)
	}
	for knob, get := range knobs {
		name := knobFlagName(knob)
		if !set[name] {
			continue
		}
		v := get()
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			return cfg, fmt.Errorf("invalid configuration: --%s %v: want a finite number", name, f)
		}
		cfg.SetPoolKnob(*pool, knob, v)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("invalid configuration: %v", err)
	}
	return cfg, nil
}

func knobFlagName(knob string) string { return strings.ReplaceAll(knob, "_", "-") }

// poolKnobs defines one typed flag per pool knob and returns, per knob name, its value getter.
func poolKnobs(fs *flag.FlagSet) map[string]func() any {
	out := map[string]func() any{}
	for _, k := range poolKnobFlags {
		name := knobFlagName(k.knob)
		switch k.kind {
		case "int":
			v := fs.Int(name, 0, k.help)
			out[k.knob] = func() any { return *v }
		case "bool":
			v := fs.Bool(name, false, k.help)
			out[k.knob] = func() any { return *v }
		case "string":
			v := fs.String(name, "", k.help)
			out[k.knob] = func() any { return *v }
		case "list":
			v := fs.String(name, "", k.help)
			out[k.knob] = func() any { return splitList(*v) }
		default:
			v := fs.Float64(name, 0, k.help)
			out[k.knob] = func() any { return *v }
		}
	}
	return out
}
