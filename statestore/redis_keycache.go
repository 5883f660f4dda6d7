package statestore

import (
	"sync"

	"github.com/kvrouter/kvrouter/luascripts"
)

// keyCache memoizes the KEYS of an operation on a pool: scriptKeys is a pure function of the operation,
// the store's prefix and the pool name, and building it is a hex encoding and up to 27 string
// concatenations per call (with routeArgs, ~9 µs and 56 allocations per route + done on the benchmark
// box's client: CPU a router spends per decision, and on a 2-core box CPU taken from Redis). The slices
// it returns are shared: read-only for callers (rueidis copies them into the command). Bounded: emptied
// when it reaches keyCacheMax entries, since pool names come from requests (an unknown pool is refused by
// the script, after its keys were built).
type keyCache struct {
	mu sync.RWMutex
	m  map[keyCacheEntry][]string
}

type keyCacheEntry struct{ script, pool string }

// keyCacheMax bounds the cache: (operation, pool) pairs, ~2 KB each.
const keyCacheMax = 4096

// get returns scriptKeys(s, prefix, pool), memoized.
func (c *keyCache) get(s luascripts.Script, prefix, pool string) []string {
	k := keyCacheEntry{s.Name, pool}
	c.mu.RLock()
	keys, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return keys
	}
	keys = scriptKeys(s, prefix, pool)
	c.mu.Lock()
	if c.m == nil || len(c.m) >= keyCacheMax {
		c.m = make(map[keyCacheEntry][]string)
	}
	c.m[k] = keys
	c.mu.Unlock()
	return keys
}
