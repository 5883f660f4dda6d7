package statestore

import (
	"crypto/rand"
	"encoding/hex"
	"time"
)

// OpenOptions tune Open.
type OpenOptions struct {
	// Fresh asks for an empty namespace: Redis keys go under a unique random prefix ("kvr:run-<hex>:"),
	// so a replay or benchmark never sees or disturbs a live router's state. The memory store is always
	// fresh. Default false (the shared "kvr:" namespace).
	Fresh bool
	// RedisTimeout bounds one Redis command's write and reply (RedisDialOptions.ConnWriteTimeout).
	// Default 0 = OpenRedis' default (15 s).
	RedisTimeout time.Duration
}

// Open opens the store a --store value names: "" or "memory" is a new embedded store, anything else a
// Redis URL (ParseRedisURL lists the forms; OpenRedis dials).
func Open(url string, o OpenOptions) (Store, error) {
	if url == "" || url == "memory" {
		return NewMemory(), nil
	}
	d := RedisDialOptions{ConnWriteTimeout: o.RedisTimeout}
	if o.Fresh {
		var b [6]byte
		rand.Read(b[:])
		d.Prefix = "kvr:run-" + hex.EncodeToString(b[:]) + ":"
	}
	return OpenRedis(url, d)
}
