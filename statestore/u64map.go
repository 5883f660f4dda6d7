package statestore

import (
	"math/bits"
	"unsafe"
)

// u64Map is a hash map from uint64 keys to V: open addressing with linear probing, Fibonacci hashing
// (multiply by 2^64/φ, keep the top bits) and backward-shift deletion (Knuth, TAOCP vol. 3, 6.4
// Algorithm R), so deletions leave no tombstones. The index lives under constant store/evict churn; Go's
// built-in map accumulates tombstones under that churn and its probe sequences grew long enough to be
// most of the index's time (pprof: maps.ctrlGroup.matchH2). The table doubles at load 1/2.
//
// Key 0 marks an empty slot, so a slot is just its key and value (no "used" byte: the event table's
// slots are 32 bytes, two per cache line). The key 0 itself lives in one extra slot past the probed
// range (index len(slots)−1), so slot indexes work the same for every key.
//
// Homes are cache-line starts (the hash picks a line, the probe starts at its first slot): a probe then
// leaves its line only when the line is full, and each line it leaves for is a cache miss the batch
// prefetch (touch) does not cover. On the Mooncake replay (block 16) this cut the probes that leave
// their home line from 5.13 M to 3.84 M in the event table and from 1.73 M to 0.86 M in the engine
// maps, for ~10 % more probed slots (all within lines already fetched).
type u64Map[V any] struct {
	slots []u64Slot[V] // 2^k probed slots, then the slot of key 0
	shift uint         // 64 − k
	mask  uint64       // 2^k − 1
	homes uint64       // mask with the slot-within-a-cache-line bits cleared (homes are line starts)
	n     int
	zero  bool // key 0 is present (in the last slot)
}

type u64Slot[V any] struct {
	key uint64 // 0: empty (in the probed range)
	val V
}

// fibonacciMul is 2^64/φ rounded to odd: Fibonacci hashing's multiplier. prefetch_amd64.s repeats it
// (TestPrefetchAsmUsesFibonacciMul).
const fibonacciMul = 0x9e3779b97f4a7c15

func (m *u64Map[V]) home(key uint64) uint64 { return (key * fibonacciMul) >> m.shift & m.homes }

// cacheLine is the CPU's cache line, bytes. Tables above 32 KiB are page-aligned Go allocations, so
// their slot 0 starts a line; smaller ones stay in the cache anyway.
const cacheLine = 64

// slotsPerLine is how many slots share a cache line (1 for slots of a line or more).
func (m *u64Map[V]) slotsPerLine() uint64 {
	return max(uint64(cacheLine/unsafe.Sizeof(u64Slot[V]{})), 1)
}

// zeroAt is the index of key 0's slot.
func (m *u64Map[V]) zeroAt() int { return len(m.slots) - 1 }

func (m *u64Map[V]) init(size int) {
	m.slots = make([]u64Slot[V], size+1)
	m.shift = uint(64 - bits.TrailingZeros(uint(size)))
	m.mask = uint64(size - 1)
	m.homes = m.mask &^ (m.slotsPerLine() - 1)
}

// Len returns the number of keys.
func (m *u64Map[V]) Len() int { return m.n }

// usedAt reports whether table slot i (in [0, len(slots))) holds a key.
func (m *u64Map[V]) usedAt(i int) bool {
	if i == m.zeroAt() {
		return m.zero
	}
	return m.slots[i].key != 0
}

// holds reports whether table slot i (any int) holds key: a slot index kept across changes is still
// good when it does (deletions shift entries back, growth moves them all).
func (m *u64Map[V]) holds(i int, key uint64) bool {
	return i >= 0 && i < len(m.slots) && m.slots[i].key == key && m.usedAt(i)
}

// find returns the slot index of key, or -1.
func (m *u64Map[V]) find(key uint64) int {
	if m.n == 0 {
		return -1
	}
	if key == 0 {
		if m.zero {
			return m.zeroAt()
		}
		return -1
	}
	for i := m.home(key); ; i = (i + 1) & m.mask {
		k := m.slots[i].key
		if k == key {
			return int(i)
		}
		if k == 0 {
			return -1
		}
	}
}

// Get returns the value of key (the zero value if absent) and whether it was present.
func (m *u64Map[V]) Get(key uint64) (V, bool) {
	if i := m.find(key); i >= 0 {
		return m.slots[i].val, true
	}
	var zero V
	return zero, false
}

// Ref returns a pointer to key's value, inserting the zero value if absent. The pointer is valid until
// the next insertion or deletion.
func (m *u64Map[V]) Ref(key uint64) *V {
	i, _ := m.refIndex(key)
	return &m.slots[i].val
}

// refIndex returns the table slot of key, inserting the zero value if absent (inserted true). The index
// is valid until the next insertion or deletion. One probe sequence serves both: with linear probing
// the empty slot that ends an unsuccessful search is where the key goes.
func (m *u64Map[V]) refIndex(key uint64) (i int, inserted bool) {
	if key == 0 {
		if m.zero {
			return m.zeroAt(), false
		}
		if m.full() {
			m.grow()
		}
		m.zero = true
		m.n++
		return m.zeroAt(), true
	}
	if len(m.slots) > 0 {
		for j := m.home(key); ; j = (j + 1) & m.mask {
			k := m.slots[j].key
			if k == key {
				return int(j), false
			}
			if k == 0 {
				if m.full() {
					break
				}
				m.slots[j].key = key
				m.n++
				return int(j), true
			}
		}
	}
	m.grow()
	j := m.home(key)
	for m.slots[j].key != 0 {
		j = (j + 1) & m.mask
	}
	m.slots[j].key = key
	m.n++
	return int(j), true
}

// full reports whether one more key would take the load past 1/2.
func (m *u64Map[V]) full() bool { return 2*(m.n+1) > len(m.slots)-1 }

// Put sets key's value.
func (m *u64Map[V]) Put(key uint64, v V) { *m.Ref(key) = v }

func (m *u64Map[V]) grow() {
	size := 8
	if len(m.slots) > 0 {
		size = 2 * (len(m.slots) - 1)
	}
	m.rehash(size)
}

// reserve makes room for n keys in all (load ≤ 1/2): one rehash now instead of one per doubling as the
// keys arrive. Each doubling of a large table rehashes all of it with the caller's lock held (a
// 1 M-entry event table: tens of ms), and the doublings together cost as much again as the last.
func (m *u64Map[V]) reserve(n int) {
	size := 8
	for size < 2*n {
		size *= 2
	}
	if size > len(m.slots)-1 {
		m.rehash(size)
	}
}

// rehash moves every key into a new table of size probed slots (a power of two, at least 2·n).
func (m *u64Map[V]) rehash(size int) {
	old := m.slots
	m.init(size)
	if len(old) == 0 {
		return
	}
	// Fibonacci hashing keeps keys in home order when the table doubles (home' = 2·home or 2·home plus
	// one line), so this loop writes the new table almost sequentially.
	for i := range old[:len(old)-1] {
		if old[i].key != 0 {
			j := m.home(old[i].key)
			for m.slots[j].key != 0 {
				j = (j + 1) & m.mask
			}
			m.slots[j] = old[i]
		}
	}
	m.slots[m.zeroAt()] = old[len(old)-1]
}

// Delete removes key if present.
func (m *u64Map[V]) Delete(key uint64) {
	if i := m.find(key); i >= 0 {
		m.deleteAt(i)
	}
}

// deleteAt removes the entry in table slot i (from find), shifting later entries of its probe chain
// back. Every slot index and pointer obtained before is invalid afterwards.
func (m *u64Map[V]) deleteAt(i int) {
	m.n--
	if i == m.zeroAt() {
		m.zero = false
		m.slots[i] = u64Slot[V]{}
	} else {
		u := uint64(i)
		for j := (u + 1) & m.mask; m.slots[j].key != 0; j = (j + 1) & m.mask {
			h := m.home(m.slots[j].key)
			// Move slot j back to u unless its home lies cyclically in (u, j].
			if (j > u && (h <= u || h > j)) || (j < u && h <= u && h > j) {
				m.slots[u] = m.slots[j]
				u = j
			}
		}
		m.slots[u] = u64Slot[V]{}
	}
	if m.n == 0 && len(m.slots) > 1024 {
		*m = u64Map[V]{} // give a cleared index's memory back
	}
}

// Range calls f for every key and value until f returns false. f must not insert or delete.
func (m *u64Map[V]) Range(f func(key uint64, v *V) bool) {
	for i := range m.slots {
		if m.usedAt(i) && !f(m.slots[i].key, &m.slots[i].val) {
			return
		}
	}
}

// touch reads the home slot of every key and returns a value derived from them. Called on a batch of
// keys before they are processed one by one, it lets the CPU fetch their cache lines in parallel
// (memory-level parallelism: the later dependent probes then hit the cache). A software prefetch with
// plain loads: prefetch's fallback where there is no prefetch instruction (prefetch_other.go).
func (m *u64Map[V]) touch(keys []uint64) uint64 {
	if len(m.slots) == 0 {
		return 0
	}
	var x uint64
	for _, k := range keys {
		x += m.slots[m.home(k)].key
	}
	return x
}
