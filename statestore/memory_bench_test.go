package statestore

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

// BenchmarkMemoryOverlap measures one lookup of a 768-block prompt (12 k tokens at block 16) over 16
// workers that each hold a 512-block prefix of it plus private branches.
func BenchmarkMemoryOverlap(b *testing.B) {
	ctx := context.Background()
	m := NewMemory()
	_ = m.PutPool(ctx, "p", DefaultPoolConfig(16))
	local := make([]uint64, 768)
	for i := range local {
		local[i] = uint64(i + 1)
	}
	seq := blockhash.Sequence(nil, local)
	for w := 0; w < 16; w++ {
		id := fmt.Sprintf("w%02d", w)
		_ = m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id}, 0)
		depth := 256 + w*32
		ev := Event{Kind: EventStored}
		for i := 0; i < depth; i++ {
			ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i] + uint64(w), LocalHash: local[i]})
		}
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: id, Events: []Event{ev}}); err != nil {
			b.Fatal(err)
		}
	}
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
	m := NewMemory()
	_ = m.PutPool(ctx, "p", DefaultPoolConfig(16))
	local := make([]uint64, 300)
	for i := range local {
		local[i] = uint64(i + 1)
	}
	seq := blockhash.Sequence(nil, local)
	for w := 0; w < 16; w++ {
		id := fmt.Sprintf("w%02d", w)
		_ = m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id}, 0)
		ev := Event{Kind: EventStored}
		for i := 0; i < 256; i++ {
			lh := local[i]
			if w != 3 { // the others hold chains of their own
				lh = uint64(w*1000 + i + 7)
			}
			ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: uint64(w*100000 + i + 1), LocalHash: lh})
		}
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: id, Events: []Event{ev}}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		s, _ := m.Overlap(ctx, "p", seq, 0)
		if len(s) != 1 || s[0].Blocks != 256 {
			b.Fatal(s)
		}
	}
}
