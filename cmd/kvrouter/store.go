package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

func storeFlag(fs *flag.FlagSet) *string {
	return fs.String("store", "memory", "state store: memory (embedded) or a Redis URL (redis://host:port/db, rediss://..., or a comma-separated list of cluster seeds)")
}

type storeOptions struct {
	// fresh asks for an empty namespace (replay, bench): Redis keys go under a unique prefix.
	fresh bool
	// prefix, when set, is the Redis key namespace (it wins over fresh).
	prefix string
	// routeScript replaces the route script's source (bench route --route-script).
	routeScript string
}

// openStore opens the store named by a --store url. KVROUTER_REDIS_TIMEOUT (a Go duration) overrides
// the Redis command timeout (15 s): large ingest calls on a loaded box can take longer.
func openStore(url string, opts storeOptions) (statestore.Store, error) {
	o := statestore.OpenOptions{Fresh: opts.fresh, Prefix: opts.prefix, RouteScript: opts.routeScript}
	if v := os.Getenv("KVROUTER_REDIS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("KVROUTER_REDIS_TIMEOUT %q: want a positive Go duration", v)
		}
		o.RedisTimeout = d
	}
	st, err := statestore.Open(url, o)
	if err != nil {
		return nil, fmt.Errorf("--store: %w", err)
	}
	return st, nil
}
