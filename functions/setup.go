package functions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer"
)

// Config is a Lambda function's configuration, read from the environment (KVROUTER_<NAME>).
type Config struct {
	// Store (KVROUTER_STORE): "memory" or a Redis URL (redis://host:port/db, rediss://... for TLS, a
	// comma-separated list of cluster seeds). Default "memory" (only useful for tests: every execution
	// environment would have its own state).
	Store string
	// Pool (KVROUTER_POOL) and BlockSize (KVROUTER_BLOCK_SIZE, tokens, default 16): the pool created at
	// cold start if the store does not have it yet (never overwritten).
	Pool      string
	BlockSize int
	// Tokenizer (KVROUTER_TOKENIZER): tokenizer.json path in the deployment package; "" = token ids only.
	Tokenizer string
	// StoreTimeout (KVROUTER_STORE_TIMEOUT, Go duration, default 2s): bound on one request's store work.
	StoreTimeout time.Duration
	// MaxBodyBytes (KVROUTER_MAX_BODY_BYTES, default 6291456 = Lambda's payload limit).
	MaxBodyBytes int
	// LogLevel (KVROUTER_LOG_LEVEL): debug, info, warn, error. Default info.
	LogLevel string
	// The gateway function's proxy (gateway.Options documents each): ProxyRetries
	// (KVROUTER_PROXY_RETRIES, count, default 2, 0 = none), ProxyIdleTimeout (KVROUTER_PROXY_IDLE_TIMEOUT,
	// Go duration, default 5m: the longest silence of a worker, also the longest non-streamed generation)
	// and ProxyConnectTimeout (KVROUTER_PROXY_CONNECT_TIMEOUT, default 5s). Other functions ignore them.
	ProxyRetries        int
	ProxyIdleTimeout    time.Duration
	ProxyConnectTimeout time.Duration
	// AuthTokens (KVROUTER_AUTH_TOKENS): a tokens file in the deployment package ("SCOPE TOKEN" lines,
	// api.LoadTokens). Set, every request needs a bearer token of its endpoint's scope besides the IAM
	// authorisation in front (SPEC §7.3). Default "": IAM only.
	AuthTokens string
}

// ConfigFromEnv reads the configuration; errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	g := gateway.DefaultOptions()
	c := Config{Store: "memory", Pool: core.DefaultPool, BlockSize: 16, StoreTimeout: 2 * time.Second, MaxBodyBytes: 6 << 20, LogLevel: "info",
		ProxyRetries: g.Retries, ProxyIdleTimeout: g.IdleTimeout, ProxyConnectTimeout: g.ConnectTimeout}
	if v := getenv("KVROUTER_STORE"); v != "" {
		c.Store = v
	}
	if v := getenv("KVROUTER_POOL"); v != "" {
		c.Pool = v
	}
	if v := getenv("KVROUTER_TOKENIZER"); v != "" {
		c.Tokenizer = v
	}
	if v := getenv("KVROUTER_LOG_LEVEL"); v != "" {
		c.LogLevel = v
	}
	c.AuthTokens = getenv("KVROUTER_AUTH_TOKENS")
	var err error
	if v := getenv("KVROUTER_BLOCK_SIZE"); v != "" {
		if c.BlockSize, err = strconv.Atoi(v); err != nil || c.BlockSize <= 0 || c.BlockSize > statestore.MaxBlockSize {
			return c, fmt.Errorf("KVROUTER_BLOCK_SIZE=%q: want an integer in [1, %d]", v, statestore.MaxBlockSize)
		}
	}
	if v := getenv("KVROUTER_STORE_TIMEOUT"); v != "" {
		if c.StoreTimeout, err = time.ParseDuration(v); err != nil || c.StoreTimeout <= 0 {
			return c, fmt.Errorf("KVROUTER_STORE_TIMEOUT=%q: want a positive duration such as 2s", v)
		}
	}
	if v := getenv("KVROUTER_MAX_BODY_BYTES"); v != "" {
		if c.MaxBodyBytes, err = strconv.Atoi(v); err != nil || c.MaxBodyBytes < 1024 {
			return c, fmt.Errorf("KVROUTER_MAX_BODY_BYTES=%q: want an integer >= 1024", v)
		}
	}
	if v := getenv("KVROUTER_PROXY_RETRIES"); v != "" {
		if c.ProxyRetries, err = strconv.Atoi(v); err != nil || c.ProxyRetries < 0 || c.ProxyRetries > 10 {
			return c, fmt.Errorf("KVROUTER_PROXY_RETRIES=%q: want an integer in [0, 10]", v)
		}
	}
	for _, d := range []struct {
		name string
		dst  *time.Duration
	}{{"KVROUTER_PROXY_IDLE_TIMEOUT", &c.ProxyIdleTimeout}, {"KVROUTER_PROXY_CONNECT_TIMEOUT", &c.ProxyConnectTimeout}} {
		if v := getenv(d.name); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst <= 0 {
				return c, fmt.Errorf("%s=%q: want a positive duration such as 30s", d.name, v)
			}
		}
	}
	if err := statestore.CheckID("KVROUTER_POOL", c.Pool); err != nil {
		return c, err
	}
	if _, err := logLevel(c.LogLevel); err != nil {
		return c, err
	}
	return c, nil
}

func logLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("KVROUTER_LOG_LEVEL=%q: want debug, info, warn or error", s)
}

// OpenStore opens "memory" or a Redis URL. The Redis client suits Lambda: one per execution environment,
// few connections (an environment serves one invocation at a time), a write timeout so a connection
// that died while the environment was frozen is noticed, no client-side cache.
func OpenStore(ctx context.Context, url string) (statestore.Store, error) {
	if url == "" || url == "memory" {
		return statestore.NewMemory(), nil
	}
	// One small client per execution environment: it serves one invocation at a time, and a 2 s write
	// deadline notices a socket that died while the environment was frozen.
	st, err := statestore.OpenRedis(url, statestore.RedisDialOptions{ConnWriteTimeout: 2 * time.Second, BlockingPoolSize: 2})
	if err != nil {
		return nil, fmt.Errorf("KVROUTER_STORE: %w", err)
	}
	return st, nil
}

// loadTokens reads KVROUTER_AUTH_TOKENS' file, if set (nil tokens: no bearer check).
func loadTokens(c Config) (*api.Tokens, error) {
	if c.AuthTokens == "" {
		return nil, nil
	}
	t, err := api.LoadTokens(c.AuthTokens)
	if err != nil {
		return nil, fmt.Errorf("KVROUTER_AUTH_TOKENS: %v", err)
	}
	return t, nil
}

// newLogger is a function's logger: JSON lines on stderr (CloudWatch) at the configured level.
func newLogger(c Config) *slog.Logger {
	level, _ := logLevel(c.LogLevel)
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// setupRouter opens the store and builds the router, creating the configured pool if the store does not
// have it yet (an unreachable store is not fatal: requests answer 503 until it is back).
func setupRouter(ctx context.Context, c Config, logger *slog.Logger) (*core.Router, statestore.Store, error) {
	st, err := OpenStore(ctx, c.Store)
	if err != nil {
		return nil, nil, err
	}
	rt := core.New(api.InstrumentStore(st, nil), core.Options{})
	sctx, cancel := context.WithTimeout(ctx, 2*c.StoreTimeout)
	defer cancel()
	if _, err := rt.Store().GetPool(sctx, c.Pool); errors.Is(err, statestore.ErrUnknownPool) {
		err = rt.PutPool(sctx, c.Pool, statestore.DefaultPoolConfig(c.BlockSize))
		if err != nil {
			st.Close()
			return nil, nil, fmt.Errorf("create pool %q: %w", c.Pool, err)
		}
	} else if err != nil {
		logger.Warn("pool check at cold start failed", "pool", c.Pool, "err", err)
	}
	return rt, st, nil
}

// Setup builds the API of a function from its configuration: store, router, implicit pool, tokenizer.
// Call it once per execution environment (in main, before lambda.Start).
func Setup(ctx context.Context, c Config) (*api.API, statestore.Store, error) {
	logger := newLogger(c)
	var tok api.Tokenizer
	if c.Tokenizer != "" {
		t, err := tokenizer.Load(c.Tokenizer)
		if err != nil {
			return nil, nil, fmt.Errorf("KVROUTER_TOKENIZER: %v", err)
		}
		tok = t
	}
	tokens, err := loadTokens(c)
	if err != nil {
		return nil, nil, err
	}
	rt, st, err := setupRouter(ctx, c, logger)
	if err != nil {
		return nil, nil, err
	}
	a := api.New(rt, api.Options{Auth: tokens, Tokenizer: tok, Logger: logger, Timeout: c.StoreTimeout})
	return a, st, nil
}

// SetupGateway builds the gateway function's proxy core: the same gateway.Gateway `kvrouter serve` runs,
// over the same store and router as the other functions. tok turns request bodies into token ids (nil:
// gateway.RequestTokens, token-array completion prompts only). Call it once per execution environment.
func SetupGateway(ctx context.Context, c Config, tok gateway.Tokenizer) (*gateway.Gateway, statestore.Store, error) {
	logger := newLogger(c)
	tokens, err := loadTokens(c)
	if err != nil {
		return nil, nil, err
	}
	opts := gateway.Options{Authorize: tokens.Authorizer(api.ScopeRoute), Retries: c.ProxyRetries, NoRetries: c.ProxyRetries == 0, IdleTimeout: c.ProxyIdleTimeout,
		ConnectTimeout: c.ProxyConnectTimeout, StoreTimeout: c.StoreTimeout, Tokenizer: tok, Logger: logger,
		// One invocation at a time per execution environment: a few connections per worker suffice.
		MaxConnsPerWorker: 4}
	if err := opts.Validate(); err != nil {
		return nil, nil, fmt.Errorf("invalid configuration: %w", err)
	}
	rt, st, err := setupRouter(ctx, c, logger)
	if err != nil {
		return nil, nil, err
	}
	gw, err := gateway.New(rt, opts)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return gw, st, nil
}

// Main is the body of every cmd/lambda-* main: configuration from the environment, store and router
// created once, then start(h) runs the Lambda runtime loop.
func Main(endpoints []string, start func(h *Handler)) {
	c := mustConfig()
	a, _, err := Setup(context.Background(), c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter lambda:", err)
		os.Exit(1)
	}
	start(NewHandler(a, c.MaxBodyBytes, endpoints...))
}

// GatewayMain is the body of cmd/lambda-gateway: like Main, with the proxy core and the streamed handler.
func GatewayMain(start func(h *GatewayHandler)) {
	c := mustConfig()
	gw, _, err := SetupGateway(context.Background(), c, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter lambda gateway:", err)
		os.Exit(1)
	}
	start(NewGatewayHandler(gw, c.MaxBodyBytes, newLogger(c)))
}

// mustConfig reads the configuration or exits: a function with a bad environment cannot serve.
func mustConfig() Config {
	c, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter lambda: invalid configuration:", err)
		os.Exit(1)
	}
	return c
}
