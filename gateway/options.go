package gateway

import (
	"fmt"
	"log/slog"
	"time"
)

// Options configure a Gateway. Zero fields take the documented defaults; Validate names the first bad one
// by its `kvrouter serve` flag.
type Options struct {
	// Retries is how many times a request is routed again after a connect failure or a 429/503 answered
	// before any byte reached the client (SPEC §7.2), count. Default 2 (three attempts at most);
	// range [0, 10]. Use NoRetries for 0.
	Retries int
	// NoRetries forces Retries to 0 (the zero value of Retries means the default).
	NoRetries bool
	// IdleTimeout bounds every wait on a worker without a byte moving: the response head, each chunk of a
	// stream, and a non-streaming answer as a whole (engines send it only at the end, so this is also the
	// longest non-streaming generation allowed). There is no whole-response timeout. Default 5 min.
	IdleTimeout time.Duration
	// ConnectTimeout bounds dialling a worker. Default 5 s.
	ConnectTimeout time.Duration
	// MaxConnsPerWorker bounds the pooled connections to one worker URL (a request waits up to
	// ConnectTimeout for a free one, then counts as a connect failure and is retried elsewhere).
	// Default 1024; range [1, 65536].
	MaxConnsPerWorker int
	// MaxResponseBytes bounds a non-streaming answer read from a worker, bytes (502 above). Streams are
	// not bounded. Default 64 MiB.
	MaxResponseBytes int
	// ModelCacheTTL is how long the model → pool map (and the worker list used for tokenize: engine) is
	// cached per gateway, so a request costs no extra store round trip. Default 2 s.
	ModelCacheTTL time.Duration
	// StoreTimeout bounds each state-store call the gateway makes (route, done, renew, health). Default 5 s.
	StoreTimeout time.Duration
	// Tokenizer turns request bodies into token ids. Default: a prompt.Resolver with its default
	// options (each pool's tokenize mode: local tokenizer and chat template, a worker's /tokenize, or
	// none; token-array completion prompts as given).
	Tokenizer Tokenizer
	// Metrics records requests, retries and upstream latency. Default nil: nothing is recorded.
	Metrics *Metrics
	// Logger gets one debug line per forward and warnings for upstream failures. Default slog.Default().
	Logger *slog.Logger
	// Authorize, when set, is asked first with the request's Authorization header (SPEC §7.3; every
	// gateway endpoint needs the route scope). A non-zero status refuses the request with it (401 or
	// 403), in OpenAI's error shape with code and msg. Default nil: no access control.
	Authorize func(authorization string) (status int, code, msg string)
}

// DefaultOptions returns the documented defaults.
func DefaultOptions() Options {
	return Options{Retries: 2, IdleTimeout: 5 * time.Minute, ConnectTimeout: 5 * time.Second,
		MaxConnsPerWorker: 1024, MaxResponseBytes: 64 << 20, ModelCacheTTL: 2 * time.Second,
		StoreTimeout: 5 * time.Second}
}

// withDefaults fills zero fields.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.Retries == 0 && !o.NoRetries {
		o.Retries = d.Retries
	}
	if o.NoRetries {
		o.Retries = 0
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = d.ConnectTimeout
	}
	if o.MaxConnsPerWorker == 0 {
		o.MaxConnsPerWorker = d.MaxConnsPerWorker
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = d.MaxResponseBytes
	}
	if o.ModelCacheTTL == 0 {
		o.ModelCacheTTL = d.ModelCacheTTL
	}
	if o.StoreTimeout == 0 {
		o.StoreTimeout = d.StoreTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Validate names the first bad option by its flag.
func (o Options) Validate() error {
	o = o.withDefaults()
	switch {
	case o.Retries < 0 || o.Retries > 10:
		return fmt.Errorf("proxy-retries must be in [0, 10], got %d", o.Retries)
	case o.IdleTimeout < 0:
		return fmt.Errorf("proxy-idle-timeout must be > 0, got %s", o.IdleTimeout)
	case o.ConnectTimeout < 0:
		return fmt.Errorf("proxy-connect-timeout must be > 0, got %s", o.ConnectTimeout)
	case o.MaxConnsPerWorker < 1 || o.MaxConnsPerWorker > 65536:
		return fmt.Errorf("proxy-max-conns-per-worker must be in [1, 65536], got %d", o.MaxConnsPerWorker)
	case o.MaxResponseBytes < 1<<10:
		return fmt.Errorf("proxy-max-response-bytes must be >= 1024, got %d", o.MaxResponseBytes)
	case o.ModelCacheTTL < 0:
		return fmt.Errorf("model cache TTL must be >= 0, got %s", o.ModelCacheTTL)
	case o.StoreTimeout < 0:
		return fmt.Errorf("store-timeout must be > 0, got %s", o.StoreTimeout)
	}
	return nil
}
