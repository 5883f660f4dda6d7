package statestore

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestU64MapMatchesGoMap(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var m u64Map[int]
		ref := map[uint64]int{}
		for range rapid.IntRange(0, 2000).Draw(t, "ops") {
			k := rapid.Uint64Range(0, 64).Draw(t, "k") * rapid.SampledFrom([]uint64{1, 1 << 58, 0x9e3779b97f4a7c15}).Draw(t, "spread")
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 3:
				m.reserve(rapid.IntRange(0, 300).Draw(t, "reserve"))
			case 0:
				v := rapid.Int().Draw(t, "v")
				m.Put(k, v)
				ref[k] = v
			case 1:
				m.Delete(k)
				delete(ref, k)
			default:
				got, ok := m.Get(k)
				want, wok := ref[k]
				if ok != wok || got != want {
					t.Fatalf("get %d: %v %v, want %v %v", k, got, ok, want, wok)
				}
			}
			if m.Len() != len(ref) {
				t.Fatalf("len %d, want %d", m.Len(), len(ref))
			}
		}
		n := 0
		m.Range(func(k uint64, v *int) bool {
			if ref[k] != *v {
				t.Fatalf("range %d: %d want %d", k, *v, ref[k])
			}
			n++
			return true
		})
		if n != len(ref) {
			t.Fatalf("range saw %d keys, want %d", n, len(ref))
		}
	})
}

// A reserved map takes that many keys without rehashing (the presizing of the embedded index relies on
// it), and reserving keeps the keys it holds.
func TestU64MapReserve(t *testing.T) {
	var m u64Map[int]
	for k := uint64(1); k <= 100; k++ {
		m.Put(k, int(k))
	}
	m.reserve(5000)
	slots := len(m.slots)
	for k := uint64(1); k <= 5000; k++ {
		if k <= 100 {
			if v, ok := m.Get(k); !ok || v != int(k) {
				t.Fatalf("key %d after reserve: %v %v", k, v, ok)
			}
		}
		m.Put(k, int(k))
	}
	if len(m.slots) != slots || m.Len() != 5000 {
		t.Fatalf("grew from %d to %d slots for 5000 keys after reserve(5000) (len %d)", slots, len(m.slots), m.Len())
	}
	m.reserve(10) // never shrinks
	if len(m.slots) != slots {
		t.Fatalf("reserve(10) resized %d → %d", slots, len(m.slots))
	}
}

// The assembly prefetch computes u64Map.home itself: a multiplier that drifted from fibonacciMul would
// prefetch the wrong lines (no error, just the speed lost).
func TestPrefetchAsmUsesFibonacciMul(t *testing.T) {
	src, err := os.ReadFile("prefetch_amd64.s")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("MOVQ $%#x, R11", uint64(fibonacciMul)); !strings.Contains(string(src), want) {
		t.Fatalf("prefetch_amd64.s does not load fibonacciMul (%q)", want)
	}
}
