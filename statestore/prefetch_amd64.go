package statestore

import "unsafe"

// prefetchHomes issues a PREFETCHT0 for the home slot of every key of a u64Map whose slots start at
// base (prefetch_amd64.s).
//
//go:noescape
func prefetchHomes(base unsafe.Pointer, keys []uint64, shift uint, homes uint64, slotSize uintptr)

// prefetch asks the CPU for the home cache lines of keys without waiting for them: the misses overlap
// with each other and with the work that follows, where touch's loads hold up everything behind them
// until the slowest line arrives. It returns 0 (touch's sum elsewhere: prefetch_other.go).
func (m *u64Map[V]) prefetch(keys []uint64) uint64 {
	if len(m.slots) == 0 || len(keys) == 0 {
		return 0
	}
	prefetchHomes(unsafe.Pointer(&m.slots[0]), keys, m.shift, m.homes, unsafe.Sizeof(m.slots[0]))
	return 0
}
