package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

func init() { openRedisStore = openRedis }

// openRedis opens the Redis store named by a --store URL (statestore.ParseRedisURL lists the forms).
func openRedis(_ context.Context, url string, opts storeOptions) (statestore.Store, error) {
	o := statestore.RedisDialOptions{}
	// Large ingest calls on a loaded box can take longer than the default write/read deadline (15 s);
	// KVROUTER_REDIS_TIMEOUT (a Go duration) overrides it.
	if v := os.Getenv("KVROUTER_REDIS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("KVROUTER_REDIS_TIMEOUT %q: want a positive Go duration", v)
		}
		o.ConnWriteTimeout = d
	}
	if opts.fresh { // replay, bench: a private namespace
		var b [6]byte
		rand.Read(b[:])
		o.Prefix = "kvr:run-" + hex.EncodeToString(b[:]) + ":"
	}
	st, err := statestore.OpenRedis(url, o)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return st, nil
}
