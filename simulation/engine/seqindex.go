package engine

import "math/bits"

// seqIndex maps sequence hashes to pool slots: an open-addressing hash table with linear probing and
// backward-shift deletion (Knuth, TAOCP vol. 3, 6.4 Algorithm R), so deletes leave no tombstones and
// probe chains stay short under the pool's constant insert/evict churn. Its size is fixed: a power of
// two at least twice the pool's capacity, so the load factor never exceeds 1/2. Keys are spread by
// Fibonacci hashing (multiplication by 2^64/φ, top bits), which also copes with non-random test keys.
// It replaces a Go map, which was most of the simulator's time.
type seqIndex struct {
	buckets []bucket
	shift   uint // 64 − log2(len(buckets))
	mask    uint64
	n       int
}

// bucket keeps key and slot together: one cache line touch per probe (evictions probe cold memory).
type bucket struct {
	key  uint64
	slot int32 // pool slot + 1; 0 marks an empty bucket
}

func newSeqIndex(capacity int) seqIndex {
	size := 1 << bits.Len(uint(2*capacity-1)) // smallest power of two >= 2·capacity
	size = max(size, 8)
	return seqIndex{
		buckets: make([]bucket, size),
		shift:   uint(64 - bits.TrailingZeros(uint(size))),
		mask:    uint64(size - 1),
	}
}

func (x *seqIndex) home(key uint64) uint64 { return (key * 0x9e3779b97f4a7c15) >> x.shift }

// get returns the slot of key, or ok false.
func (x *seqIndex) get(key uint64) (slot int32, ok bool) {
	for i := x.home(key); ; i = (i + 1) & x.mask {
		b := x.buckets[i]
		if b.slot == 0 {
			return 0, false
		}
		if b.key == key {
			return b.slot - 1, true
		}
	}
}

// put adds key → slot; key must be absent.
func (x *seqIndex) put(key uint64, slot int32) {
	i := x.home(key)
	for x.buckets[i].slot != 0 {
		i = (i + 1) & x.mask
	}
	x.buckets[i] = bucket{key, slot + 1}
	x.n++
}

// del removes key, which must be present, shifting later entries of its probe chain back.
func (x *seqIndex) del(key uint64) {
	i := x.home(key)
	for x.buckets[i].key != key || x.buckets[i].slot == 0 {
		i = (i + 1) & x.mask
	}
	// Algorithm R: move back any later entry whose home is not cyclically in (i, j].
	for j := (i + 1) & x.mask; x.buckets[j].slot != 0; j = (j + 1) & x.mask {
		h := x.home(x.buckets[j].key)
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			x.buckets[i] = x.buckets[j]
			i = j
		}
	}
	x.buckets[i] = bucket{}
	x.n--
}

func (x *seqIndex) len() int { return x.n }

// each calls f for every key, in table order.
func (x *seqIndex) each(f func(key uint64)) {
	for _, b := range x.buckets {
		if b.slot != 0 {
			f(b.key)
		}
	}
}
