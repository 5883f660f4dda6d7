package statestore

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// OpenOptions tune Open.
type OpenOptions struct {
	// Fresh asks for an empty namespace: Redis keys go under a unique random prefix ("kvr:r<hex>:"),
	// so a replay or benchmark never sees or disturbs a live router's state. The memory store is always
	// fresh. Default false (the shared "kvr:" namespace).
	Fresh bool
	// Prefix is the Redis key namespace (e.g. a benchmark index kept between runs); it wins over Fresh.
	// Default "" = "kvr:", or a fresh one.
	Prefix string
	// RouteScript replaces the route script's source (RedisOptions.RouteScript). Default "" = embedded.
	RouteScript string
	// RedisTimeout bounds one Redis command's write and reply (RedisDialOptions.ConnWriteTimeout).
	// Default 0 = OpenRedis' default (15 s).
	RedisTimeout time.Duration
	// Limits on pools and workers (SPEC §7.3), for either store. Default: Limits' defaults.
	Limits Limits
}

// Open opens the store a --store value names: "" or "memory" is a new embedded store, anything else a
// Redis URL (ParseRedisURL lists the forms; OpenRedis dials).
func Open(url string, o OpenOptions) (Store, error) {
	if err := o.Limits.Validate(); err != nil {
		return nil, err
	}
	if url == "" || url == "memory" {
		return NewMemoryLimits(o.Limits), nil
	}
	d := RedisDialOptions{ConnWriteTimeout: o.RedisTimeout, Prefix: o.Prefix, RouteScript: o.RouteScript, Limits: o.Limits}
	if o.Fresh && d.Prefix == "" {
		d.Prefix = FreshPrefix()
	}
	return OpenRedis(url, d)
}

// FreshPrefix returns a Redis key prefix no other run uses: "kvr:r<8 hex digits>:" (32 random bits; short,
// because every key carries it on every call: docs/REDIS.md "Layout 6").
func FreshPrefix() string {
	var b [4]byte
	rand.Read(b[:])
	return "kvr:r" + hex.EncodeToString(b[:]) + ":"
}
