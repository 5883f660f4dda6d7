//go:build !amd64

package statestore

// prefetch reads the home cache lines of keys (touch): without a prefetch instruction from Go, the
// plain loads still overlap with each other. The caller keeps the sum so the loads are not optimised
// away.
func (m *u64Map[V]) prefetch(keys []uint64) uint64 { return m.touch(keys) }
