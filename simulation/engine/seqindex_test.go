package engine

import (
	"math/rand/v2"
	"testing"
)

// The table must behave like a map under random churn, for random and for sequential keys.
func TestSeqIndexMatchesMap(t *testing.T) {
	for _, sequential := range []bool{false, true} {
		rng := rand.New(rand.NewPCG(1, 2))
		x := newSeqIndex(100)
		ref := map[uint64]int32{}
		var live []uint64
		for step := range 200_000 {
			if len(live) < 100 && (len(live) == 0 || rng.IntN(2) == 0) {
				k := rng.Uint64()
				if sequential {
					k = uint64(rng.IntN(400))
				}
				if _, ok := ref[k]; ok {
					continue
				}
				ref[k] = int32(step % 1000)
				x.put(k, ref[k])
				live = append(live, k)
			} else {
				i := rng.IntN(len(live))
				k := live[i]
				live[i] = live[len(live)-1]
				live = live[:len(live)-1]
				x.del(k)
				delete(ref, k)
			}
			if step%1000 == 0 {
				for k, v := range ref {
					if got, ok := x.get(k); !ok || got != v {
						t.Fatalf("step %d: get(%d) = %d %v, want %d", step, k, got, ok, v)
					}
				}
				if _, ok := x.get(1 << 62); ok || x.len() != len(ref) {
					t.Fatalf("step %d: phantom key or length %d != %d", step, x.len(), len(ref))
				}
			}
		}
	}
}

// BenchmarkSeqIndexChurn: the pool's pattern at the default capacity, one insert and one delete of
// random keys per op at a steady 24 000 entries.
func BenchmarkSeqIndexChurn(b *testing.B) {
	const n = 24_000
	x := newSeqIndex(n)
	rng := rand.New(rand.NewPCG(1, 2))
	ring := make([]uint64, n)
	for i := range ring {
		ring[i] = rng.Uint64()
		x.put(ring[i], int32(i))
	}
	i := 0
	for b.Loop() {
		x.del(ring[i])
		ring[i] = rng.Uint64()
		x.put(ring[i], int32(i))
		if _, ok := x.get(ring[(i+n/2)%n]); !ok {
			b.Fatal("lost key")
		}
		i = (i + 1) % n
	}
}
