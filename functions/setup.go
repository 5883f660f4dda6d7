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
}

// ConfigFromEnv reads the configuration; errors name the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{Store: "memory", Pool: core.DefaultPool, BlockSize: 16, StoreTimeout: 2 * time.Second, MaxBodyBytes: 6 << 20, LogLevel: "info"}
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

// Setup builds the API of a function from its configuration: store, router, implicit pool, tokenizer.
// Call it once per execution environment (in main, before lambda.Start).
func Setup(ctx context.Context, c Config) (*api.API, statestore.Store, error) {
	level, _ := logLevel(c.LogLevel)
	logger := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var tok api.Tokenizer
	if c.Tokenizer != "" {
		t, err := tokenizer.Load(c.Tokenizer)
		if err != nil {
			return nil, nil, fmt.Errorf("KVROUTER_TOKENIZER: %v", err)
		}
		tok = t
	}
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
		// Not fatal: Redis may come back; requests answer 503 meanwhile.
		logger.Warn("pool check at cold start failed", "pool", c.Pool, "err", err)
	}
	a := api.New(rt, api.Options{Tokenizer: tok, Logger: logger, Timeout: c.StoreTimeout})
	return a, st, nil
}

// Main is the body of every cmd/lambda-* main: configuration from the environment, store and router
// created once, then start(h) runs the Lambda runtime loop.
func Main(endpoints []string, start func(h *Handler)) {
	ctx := context.Background()
	c, err := ConfigFromEnv(os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter lambda: invalid configuration:", err)
		os.Exit(1)
	}
	a, _, err := Setup(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvrouter lambda:", err)
		os.Exit(1)
	}
	start(NewHandler(a, c.MaxBodyBytes, endpoints...))
}
