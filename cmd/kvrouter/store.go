package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/kvrouter/kvrouter/statestore"
)

func storeFlag(fs *flag.FlagSet) *string {
	return fs.String("store", "memory", "state store: memory (embedded) or a Redis URL (redis://host:port/db, rediss://..., or a comma-separated list of cluster seeds)")
}

type storeOptions struct {
	// fresh asks for an empty namespace (replay, bench): Redis keys go under a unique prefix.
	fresh bool
}

// openStore opens the store named by url.
func openStore(ctx context.Context, url string, opts storeOptions) (statestore.Store, error) {
	if url == "" || url == "memory" {
		return statestore.NewMemory(), nil
	}
	return openRedisStore(ctx, url, opts)
}

var openRedisStore = func(ctx context.Context, url string, opts storeOptions) (statestore.Store, error) {
	return nil, fmt.Errorf("--store %q: the Redis store is not built into this binary", url)
}
