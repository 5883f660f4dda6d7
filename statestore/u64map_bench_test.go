package statestore

import "testing"

// The floor of the event index: every stored block costs at least four reads of a random cache line on
// a random 4 KiB page (event table and engine map, on store and on removal). These benchmarks measure
// one such read on the machine at hand, in a table of the replay's size (2^21 32-byte slots, 64 MiB):
// Dependent is one miss at a time (a probe whose address depends on the previous one); Batched is the
// prefetch pattern (touch a chunk of prefetchChunk independent keys, so their misses overlap); Reread
// measures a batch's touch and then a second read of its lines, which the apply loop relies on hitting
// the cache and the TLB (Reread − Batched is the second read), RereadWholeEvent the same for a batch of
// 2,048 keys. ns/op is per key. `go test ./statestore -run '^$' -bench RandomLine`.

func randomLineTable() *u64Map[blockEntry] {
	var m u64Map[blockEntry]
	m.init(1 << 21)
	for i := range m.slots {
		m.slots[i].key = uint64(i) | 1
	}
	return &m
}

func BenchmarkRandomLineDependent(b *testing.B) {
	m := randomLineTable()
	x := uint64(1)
	b.ResetTimer()
	for range b.N {
		x += m.slots[m.home(x*0x2545f4914f6cdd1d)].key
	}
	sinkU64 = x
}

func BenchmarkRandomLineBatched(b *testing.B) {
	m := randomLineTable()
	keys := make([]uint64, prefetchChunk)
	var x uint64
	b.ResetTimer()
	for n := 0; n < b.N; n += len(keys) {
		fillKeys(keys, uint64(n))
		x += m.touch(keys)
	}
	sinkU64 = x
}

func BenchmarkRandomLineReread(b *testing.B) { rereadLines(b, prefetchChunk) }

// BenchmarkRandomLineRereadWholeEvent is Reread with batches of a large event's 2 × 1,024 keys: the
// pattern of touching a whole event before applying it.
func BenchmarkRandomLineRereadWholeEvent(b *testing.B) { rereadLines(b, 2048) }

// BenchmarkRandomLineRereadPrefetched is Reread with u64Map.prefetch (PREFETCHT0 on amd64) in place of
// touch: the pattern of the event apply loop since the ninth session.
func BenchmarkRandomLineRereadPrefetched(b *testing.B) { rereadLinesWith(b, prefetchChunk, true) }

func rereadLines(b *testing.B, batch int) { rereadLinesWith(b, batch, false) }

func rereadLinesWith(b *testing.B, batch int, prefetch bool) {
	m := randomLineTable()
	keys := make([]uint64, batch)
	var x uint64
	b.ResetTimer()
	for n := 0; n < b.N; n += len(keys) {
		fillKeys(keys, uint64(n))
		if prefetch {
			x += m.prefetch(keys)
		} else {
			x += m.touch(keys)
		}
		for _, k := range keys {
			x += m.slots[m.home(k)].val.parent
		}
	}
	sinkU64 = x
}

var sinkU64 uint64

// fillKeys fills keys with splitmix64 outputs from seed (about 1 ns a key, counted in the benchmarks).
func fillKeys(keys []uint64, seed uint64) {
	for j := range keys {
		z := (seed + uint64(j) + 1) * 0x9e3779b97f4a7c15
		z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
		z = (z ^ z>>27) * 0x94d049bb133111eb
		keys[j] = z ^ z>>31
	}
}
