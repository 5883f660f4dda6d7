package statestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

// overlapBenchStore is a 16-worker pool whose worker w stores blocks(w) local hashes as one chain,
// and the sequence hashes of the query of n blocks 1..n.
func overlapBenchStore(b *testing.B, n int, blocks func(w int) []uint64) (*Memory, []uint64) {
	ctx := context.Background()
	m := NewMemory()
	_ = m.PutPool(ctx, "p", DefaultPoolConfig(16))
	local := make([]uint64, n)
	for i := range local {
		local[i] = uint64(i + 1)
	}
	for w := 0; w < 16; w++ {
		id := fmt.Sprintf("w%02d", w)
		_ = m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id}, 0)
		ev := Event{Kind: EventStored}
		for i, lh := range blocks(w) {
			ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: uint64(w*100000 + i + 1), LocalHash: lh})
		}
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: id, Events: []Event{ev}}); err != nil {
			b.Fatal(err)
		}
	}
	return m, blockhash.Sequence(nil, local)
}

// BenchmarkMemoryOverlap measures one lookup of a 768-block prompt (12 k tokens at block 16) over 16
// workers that each hold a prefix of it (256 + 32·w blocks).
func BenchmarkMemoryOverlap(b *testing.B) {
	ctx := context.Background()
	m, seq := overlapBenchStore(b, 768, func(w int) []uint64 {
		out := make([]uint64, 256+w*32)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	})
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		s, _ := m.Overlap(ctx, "p", seq, 0)
		if len(s) != 16 {
			b.Fatal(len(s))
		}
	}
	b.ReportMetric(float64(len(seq))*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mblockops/s")
}

// BenchmarkMemoryStore measures applying Stored events of 32 blocks (block ops per second).
func BenchmarkMemoryStore(b *testing.B) {
	ctx := context.Background()
	m := NewMemory()
	_ = m.PutPool(ctx, "p", DefaultPoolConfig(16))
	_ = m.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w"}, 0)
	local := make([]uint64, 32)
	n := uint64(0)
	b.ReportAllocs()
	for b.Loop() {
		ev := Event{Kind: EventStored}
		for range local {
			n++
			ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: n, LocalHash: n})
		}
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: "w", Events: []Event{ev}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(32*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mblockops/s")
}

// BenchmarkMemoryOverlapOneHolder measures one lookup of a 300-block prompt of which one of 16 workers
// holds 256 blocks (the common case of the Mooncake replay: one holder per block), warm: the fixed
// cost of a lookup.
func BenchmarkMemoryOverlapOneHolder(b *testing.B) {
	ctx := context.Background()
	m, seq := overlapBenchStore(b, 300, func(w int) []uint64 {
		out := make([]uint64, 256)
		for i := range out {
			out[i] = uint64(i + 1)
			if w != 3 { // the others hold chains of their own
				out[i] = uint64(w*1000 + i + 7)
			}
		}
		return out
	})
	b.ReportAllocs()
	for b.Loop() {
		s, _ := m.Overlap(ctx, "p", seq, 0)
		if len(s) != 1 || s[0].Blocks != 256 {
			b.Fatal(s)
		}
	}
}
