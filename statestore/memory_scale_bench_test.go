package statestore

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/blockhash"
)

// fleetWorkers are the pool sizes of the fleet-scale benchmarks (issue 15).
var fleetWorkers = []int{16, 64, 256, 1024, 4096}

// fleetChains is the number of prompt chains of the fleet benchmarks: each is held by 2 workers, so the
// index holds fleetChains·2·promptBlocks entries (262,144 at 64 blocks) and a prompt has 2 holders
// whatever the pool's size — only the number of workers changes.
const fleetChains = 2048

// newFleet returns a memory store with pool "p" (block size 16) of n workers holding fleetChains chains
// of promptBlocks blocks, chain c on workers 2c and 2c+1 (mod n). It returns the chains' local hashes.
func newFleet(b *testing.B, n, promptBlocks int) (*Memory, [][]uint64) {
	return newFleetModel(b, n, promptBlocks, CostModelDynamo)
}

// newFleetModel is newFleet with the pool's cost_model.
func newFleetModel(b *testing.B, n, promptBlocks int, model string) (*Memory, [][]uint64) {
	b.Helper()
	ctx := context.Background()
	m := NewMemory()
	cfg := DefaultPoolConfig(16)
	cfg.CostModel = model
	if err := m.PutPool(ctx, "p", cfg); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(15, 15))
	chains := make([][]uint64, fleetChains)
	evs := make([][]Event, n)
	for c := range chains {
		chains[c] = make([]uint64, promptBlocks)
		for j := range chains[c] {
			chains[c][j] = r.Uint64()
		}
		seq := blockhash.Sequence(nil, chains[c])
		for _, w := range []int{(2 * c) % n, (2*c + 1) % n} {
			ev := Event{Kind: EventStored}
			for i := range seq {
				ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i] ^ uint64(w+1)<<40, LocalHash: chains[c][i]})
			}
			evs[w] = append(evs[w], ev)
		}
	}
	for w := 0; w < n; w++ {
		id := fmt.Sprintf("w%04d", w)
		if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id, URL: "http://" + id}, 0); err != nil {
			b.Fatal(err)
		}
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: id, Events: evs[w]}); err != nil {
			b.Fatal(err)
		}
	}
	return m, chains
}

// BenchmarkMemoryRouteFleet measures one decision of a 64-block prompt (half of them diverging at a
// random block) at 16 to 4,096 workers over the same index (newFleet), in a steady state of about one
// active request per worker: each op is a Route and the Done of the request routed n decisions earlier.
// cpu-ns/op is the process CPU time per op (garbage collection included), steadier than ns/op when
// other processes share the cores. Issue 15's target: 1,024
// workers within 1.5× the 64-worker time.
func BenchmarkMemoryRouteFleet(b *testing.B) { routeFleet(b, CostModelDynamo) }

// BenchmarkMemoryRouteFleetTTFT is BenchmarkMemoryRouteFleet with cost_model ttft: every decision is the
// full scan (per-rank coefficients rule out the fast path), O(workers). No prefill_done: no calibration.
func BenchmarkMemoryRouteFleetTTFT(b *testing.B) { routeFleet(b, CostModelTTFT) }

func routeFleet(b *testing.B, model string) {
	for _, n := range fleetWorkers {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			m, chains := newFleetModel(b, n, 64, model)
			r := rand.New(rand.NewPCG(1, 2))
			ring := make([]string, n)
			seq := make([]uint64, 64)
			local := make([]uint64, 64)
			i := 0
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := processCPU(b)
			for b.Loop() {
				copy(local, chains[r.IntN(len(chains))])
				if r.IntN(2) == 0 {
					local[r.IntN(len(local))] ^= 1
				}
				seq = blockhash.Sequence(seq[:0], local)
				id := fmt.Sprintf("r%d", i)
				if _, err := m.Route(ctx, RouteRequest{Pool: "p", RequestID: id, SeqHashes: seq, ISL: 64 * 16, Random: r.Float64()}); err != nil {
					b.Fatal(err)
				}
				if old := ring[i%n]; old != "" {
					if _, err := m.Done(ctx, "p", old, 0); err != nil {
						b.Fatal(err)
					}
				}
				ring[i%n] = id
				i++
			}
			b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// BenchmarkMemoryRegisterFleet measures registering n workers one by one into an empty pool (time per
// registration; linear registration keeps it flat as n grows).
func BenchmarkMemoryRegisterFleet(b *testing.B) {
	for _, n := range fleetWorkers {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) {
			ctx := context.Background()
			ids := make([]string, n)
			for w := range ids {
				ids[w] = fmt.Sprintf("w%04d", (w*7919)%n) // not in id order
			}
			b.ReportAllocs()
			for b.Loop() {
				m := NewMemory()
				if err := m.PutPool(ctx, "p", DefaultPoolConfig(16)); err != nil {
					b.Fatal(err)
				}
				for _, id := range ids {
					if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id}, 0); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/worker")
		})
	}
}

// processCPU is the process's user + system CPU time: on a shared box it counts only the time this
// benchmark ran, not the time it waited for a core (the wall-clock ns/op does).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
