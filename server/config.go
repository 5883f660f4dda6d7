package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// Config is the whole configuration of `kvrouter serve`. Sources, highest first: command-line flags,
// environment variables KVROUTER_<FLAG>, the optional YAML file (--config), DefaultConfig. YAML keys are
// the flag names with '-' → '_'.
type Config struct {
	// Addr is the listen address, host:port. Default ":8080".
	Addr string `yaml:"addr"`
	// Store is "memory" (embedded) or a Redis URL (redis://host:port/db, rediss://..., cluster seeds
	// separated by commas). Default "memory".
	Store string `yaml:"store"`
	// MaxBodyBytes bounds a request body, bytes (413 above). Default 8388608 (8 MiB); range [1024, 1 GiB].
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// MaxEvents bounds the events of one POST /v1/events, count. Default 100000.
	MaxEvents int `yaml:"max_events"`
	// ReadTimeout, WriteTimeout bound reading a request and writing a response. Default 30 s each.
	ReadTimeout  time.Duration `yaml:"read_timeout"`
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// IdleTimeout closes idle keep-alive connections. Default 120 s.
	IdleTimeout time.Duration `yaml:"idle_timeout"`
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM/SIGINT. Default 15 s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// StoreTimeout bounds each request's state-store work (and a /metrics worker scrape). Default 5 s.
	StoreTimeout time.Duration `yaml:"store_timeout"`
	// Tokenizer is a Hugging Face tokenizer.json (or tiktoken file) for "prompt" text. Default "" (none:
	// text prompts are a 400).
	Tokenizer string `yaml:"tokenizer"`
	// OTLPEndpoint enables OpenTelemetry tracing over OTLP/HTTP (host:port or a URL). Default "" (no-op).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// LogLevel is debug, info, warn or error. Default info (debug logs one line per decision).
	LogLevel string `yaml:"log_level"`
	// LogFormat is text or json. Default text.
	LogFormat string `yaml:"log_format"`
	// Pools maps a pool name to its knobs (SPEC §6.4 JSON names) plus an optional "preset"
	// ("load-aware" or "agentic", applied before the knobs). Empty: one pool named "default" with
	// block_size 16, created only if the store does not have it yet.
	Pools map[string]map[string]any `yaml:"pools"`
	// Engines are vLLM/SGLang ZMQ KV-event publishers subscribed to in-process, one
	// "WORKER=tcp://host:port[,replay=tcp://host:port][,dp=N][,url=http://…][,topic=T]" each (the syntax
	// of `kvrouter ingest --engine`). Meant for the embedded store; with Redis run `kvrouter ingest`.
	// Default none.
	Engines []string `yaml:"engine"`
	// EnginePool is the pool the Engines' workers belong to; it must be a configured pool (Pools, or
	// the implicit default pool), whose block_size the subscribers use. Default "default".
	EnginePool string `yaml:"engine_pool"`
	// RedisTimeout bounds one Redis command's write and reply. Default 0 = the store's default (15 s).
	RedisTimeout time.Duration `yaml:"redis_timeout"`
	// MaxPools (--max-pools, default 1024) and MaxWorkers (--max-workers per pool, default and
	// at most 4096) bound what callers may create: beyond them PUT answers 409 (SPEC §7.3).
	MaxPools   int `yaml:"max_pools"`
	MaxWorkers int `yaml:"max_workers"`
	// MetricsMaxWorkers caps the per-worker /metrics series (kvrouter_worker_*) at this many workers per
	// pool, the first in id order; pool-level sums (kvrouter_pool_*) always cover every worker.
	// Default 256 (api.DefaultMetricsMaxWorkers), 0 = no per-worker series, at most 4096.
	MetricsMaxWorkers int `yaml:"metrics_max_workers"`
	// ReleaseDelay is how long the gateway's done of a finished request may wait for this router's next
	// route of its pool to carry it (core.Options.ReleaseDelay, release coalescing: under load one store
	// call per decision instead of two). Default 5 ms (core.DefaultReleaseDelay), 0 = every done sent at
	// once, at most 1 s. The HTTP API's own POST /v1/done is never delayed.
	ReleaseDelay time.Duration `yaml:"release_delay"`
	// Access: tokens, the non-loopback rule and the metrics address (SPEC §7.3).
	Access `yaml:",inline"`
	// RecoverInterval is how often the router checks that its configured pools (and its --engine
	// workers) still exist in the store and re-declares what the store lost (SPEC §8 "Losing Redis").
	// Default 1 s.
	RecoverInterval time.Duration `yaml:"recover_interval"`

	// The OpenAI-compatible gateway (SPEC §7.2; gateway.Options documents each).
	// ProxyRetries: routes again after a connect failure or a 429/503 before any byte was sent. Default 2;
	// range [0, 10].
	ProxyRetries int `yaml:"proxy_retries"`
	// ProxyIdleTimeout bounds each wait on a worker with no byte moving (and so a non-streaming
	// generation). Default 5 min.
	ProxyIdleTimeout time.Duration `yaml:"proxy_idle_timeout"`
	// ProxyConnectTimeout bounds dialling a worker (and waiting for a free pooled connection). Default 5 s.
	ProxyConnectTimeout time.Duration `yaml:"proxy_connect_timeout"`
	// ProxyMaxConnsPerWorker bounds the pooled connections to one worker. Default 1024.
	ProxyMaxConnsPerWorker int `yaml:"proxy_max_conns_per_worker"`
	// GatewayTokenizer turns gateway request bodies into token ids. Default nil: token-array completion
	// prompts only (gateway.RequestTokens). Not settable from a file.
	GatewayTokenizer gateway.Tokenizer `yaml:"-"`

	// LogOutput receives the log. Default nil = stderr. Not settable from a file.
	LogOutput io.Writer `yaml:"-"`
	// OnListening, if set, is called with the bound address once the listener is open (tests and
	// embedding use it with port 0). Not settable from a file.
	OnListening func(net.Addr) `yaml:"-"`
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	o, g := DefaultOptions(), gateway.DefaultOptions()
	return Config{Addr: "127.0.0.1:8080", Store: "memory", MaxBodyBytes: o.MaxBodyBytes, MaxEvents: 100000,
		ReadTimeout: o.ReadTimeout, WriteTimeout: o.WriteTimeout, IdleTimeout: o.IdleTimeout,
		ShutdownTimeout: o.ShutdownTimeout, StoreTimeout: 5 * time.Second, RecoverInterval: DefaultRecoverInterval,
		MaxPools: statestore.DefaultMaxPools, MaxWorkers: statestore.MaxWorkersPerPool,
		MetricsMaxWorkers: api.DefaultMetricsMaxWorkers, ReleaseDelay: core.DefaultReleaseDelay, LogLevel: "info", LogFormat: "text",
		ProxyRetries: g.Retries, ProxyIdleTimeout: g.IdleTimeout, ProxyConnectTimeout: g.ConnectTimeout,
		ProxyMaxConnsPerWorker: g.MaxConnsPerWorker}
}

// GatewayOptions returns the gateway's options (without Metrics and Logger).
func (c Config) GatewayOptions() gateway.Options {
	return gateway.Options{Retries: c.ProxyRetries, NoRetries: c.ProxyRetries == 0, IdleTimeout: c.ProxyIdleTimeout,
		ConnectTimeout: c.ProxyConnectTimeout, MaxConnsPerWorker: c.ProxyMaxConnsPerWorker,
		StoreTimeout: c.StoreTimeout, Tokenizer: c.GatewayTokenizer}
}

// DefaultBlockSize is the block size of the implicit default pool.
const DefaultBlockSize = 16

// LoadConfigFile reads a YAML file on top of base. Unknown keys are errors naming the key.
func LoadConfigFile(path string, base Config) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return base, fmt.Errorf("--config: %w", err)
	}
	cfg := base
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil && !errors.Is(err, io.EOF) {
		return base, fmt.Errorf("--config %s: %v", path, err)
	}
	return cfg, nil
}

// Validate names the first bad setting (by its flag name).
func (c Config) Validate() error {
	if c.Addr == "" {
		return fmt.Errorf("addr must not be empty")
	}
	if c.Store == "" {
		return fmt.Errorf("store must not be empty (memory or a redis:// URL)")
	}
	if c.MaxEvents < 1 || c.MaxEvents > 10_000_000 {
		return fmt.Errorf("max-events must be in [1, 10000000], got %d", c.MaxEvents)
	}
	if c.RedisTimeout < 0 {
		return fmt.Errorf("redis-timeout must be >= 0, got %s", c.RedisTimeout)
	}
	if len(c.Engines) > 0 {
		if err := statestore.CheckID("pool", c.enginePool()); err != nil {
			return err
		}
	}
	if err := c.limits().Validate(); err != nil {
		return err
	}
	if c.RecoverInterval <= 0 {
		return fmt.Errorf("recover-interval must be > 0, got %s", c.RecoverInterval)
	}
	if c.StoreTimeout <= 0 {
		return fmt.Errorf("store-timeout must be > 0, got %s", c.StoreTimeout)
	}
	if c.MetricsMaxWorkers < 0 || c.MetricsMaxWorkers > statestore.MaxWorkersPerPool {
		return fmt.Errorf("metrics-max-workers must be in [0, %d], got %d", statestore.MaxWorkersPerPool, c.MetricsMaxWorkers)
	}
	if c.ReleaseDelay < 0 || c.ReleaseDelay > core.MaxReleaseDelay {
		return fmt.Errorf("release-delay must be in [0, %s], got %s", core.MaxReleaseDelay, c.ReleaseDelay)
	}
	if _, err := ParseLogLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return fmt.Errorf("log-format must be text or json, got %q", c.LogFormat)
	}
	if err := c.ServerOptions().Validate(); err != nil {
		return err
	}
	if c.ProxyIdleTimeout <= 0 || c.ProxyConnectTimeout <= 0 {
		return fmt.Errorf("proxy-idle-timeout and proxy-connect-timeout must be > 0, got %s and %s", c.ProxyIdleTimeout, c.ProxyConnectTimeout)
	}
	if err := c.GatewayOptions().Validate(); err != nil {
		return err
	}
	_, err := c.PoolConfigs()
	return err
}

func (c Config) limits() statestore.Limits {
	return statestore.Limits{MaxPools: c.MaxPools, MaxWorkers: c.MaxWorkers}
}

func (c Config) enginePool() string {
	if c.EnginePool == "" {
		return core.DefaultPool
	}
	return c.EnginePool
}

// ServerOptions returns the HTTP server's options.
func (c Config) ServerOptions() Options {
	d := DefaultOptions()
	return Options{MaxBodyBytes: c.MaxBodyBytes, ReadTimeout: c.ReadTimeout, WriteTimeout: c.WriteTimeout,
		IdleTimeout: c.IdleTimeout, ShutdownTimeout: c.ShutdownTimeout, MaxHeaderBytes: d.MaxHeaderBytes, MaxURIBytes: d.MaxURIBytes}
}

// ParseLogLevel maps a level name to slog's.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("log-level must be debug, info, warn or error, got %q", s)
}

// PoolSetup is one pool to create at startup.
type PoolSetup struct {
	Name   string
	Config statestore.PoolConfig
	// IfMissing: create only when the store has no such pool (the implicit default pool), so restarting
	// a router never resets knobs set over the API.
	IfMissing bool
}

// PoolConfigs turns Pools into validated pool configs, sorted by name; errors name the pool and knob.
func (c Config) PoolConfigs() ([]PoolSetup, error) {
	if len(c.Pools) == 0 {
		return []PoolSetup{{Name: core.DefaultPool, Config: statestore.DefaultPoolConfig(DefaultBlockSize), IfMissing: true}}, nil
	}
	names := make([]string, 0, len(c.Pools))
	for n := range c.Pools {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]PoolSetup, 0, len(names))
	for _, name := range names {
		if err := statestore.CheckID("pool name", name); err != nil {
			return nil, fmt.Errorf("pools: %v", err)
		}
		knobs := map[string]any{}
		for k, v := range c.Pools[name] {
			knobs[k] = v
		}
		base := statestore.DefaultPoolConfig(0)
		if p, ok := knobs["preset"]; ok {
			ps, isStr := p.(string)
			if !isStr {
				return nil, fmt.Errorf("pools.%s.preset must be a string", name)
			}
			var err error
			if base, err = core.ApplyPreset(base, ps); err != nil {
				return nil, fmt.Errorf("pools.%s.preset: %v", name, err)
			}
			delete(knobs, "preset")
		}
		if _, ok := knobs["block_size"]; !ok {
			base.BlockSize = DefaultBlockSize
		}
		raw, err := json.Marshal(knobs)
		if err != nil {
			return nil, fmt.Errorf("pools.%s: %v", name, err)
		}
		cfg, err := core.ParsePoolConfig(base, raw)
		if err != nil {
			return nil, fmt.Errorf("pools.%s: %v", name, err)
		}
		out = append(out, PoolSetup{Name: name, Config: cfg})
	}
	return out, nil
}

// SetPoolKnob sets one knob (or "preset") of a pool, creating the pool's entry: flags use it to override
// the file.
func (c *Config) SetPoolKnob(pool, knob string, v any) {
	if c.Pools == nil {
		c.Pools = map[string]map[string]any{}
	}
	if c.Pools[pool] == nil {
		c.Pools[pool] = map[string]any{}
	}
	c.Pools[pool][knob] = v
}
