package prompt

import (
	"container/list"
	"sync"
)

// lru is a bounded, concurrency-safe least-recently-used cache. Each entry has a cost (the caller
// picks the unit: tokens here); the total cost stays at or below capacity by evicting the least
// recently used entries. An entry costing more than capacity is not stored.
type lru[K comparable, V any] struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	order    *list.List // front = most recently used; elements hold *lruEntry
	items    map[K]*list.Element
	hits     uint64
	misses   uint64
}

type lruEntry[K comparable, V any] struct {
	key  K
	val  V
	cost int64
}

func newLRU[K comparable, V any](capacity int64) *lru[K, V] {
	return &lru[K, V]{capacity: capacity, order: list.New(), items: map[K]*list.Element{}}
}

// get returns the value of key and marks it recently used.
func (c *lru[K, V]) get(key K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.order.MoveToFront(el)
		c.hits++
		return el.Value.(*lruEntry[K, V]).val, true
	}
	c.misses++
	var zero V
	return zero, false
}

// put stores key → val with the given cost (≥ 1), evicting as needed.
func (c *lru[K, V]) put(key K, val V, cost int64) {
	cost = max(cost, 1)
	if cost > c.capacity {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		e := el.Value.(*lruEntry[K, V])
		c.used += cost - e.cost
		e.val, e.cost = val, cost
		c.order.MoveToFront(el)
	} else {
		c.items[key] = c.order.PushFront(&lruEntry[K, V]{key: key, val: val, cost: cost})
		c.used += cost
	}
	for c.used > c.capacity {
		el := c.order.Back()
		e := el.Value.(*lruEntry[K, V])
		c.order.Remove(el)
		delete(c.items, e.key)
		c.used -= e.cost
	}
}

// CacheStats describes one of the Resolver's caches.
type CacheStats struct {
	Entries      int
	Cost         int64 // in tokens
	Capacity     int64 // in tokens
	Hits, Misses uint64
}

func (c *lru[K, V]) stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Entries: len(c.items), Cost: c.used, Capacity: c.capacity, Hits: c.hits, Misses: c.misses}
}
