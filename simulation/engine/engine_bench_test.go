package engine

import (
	"testing"

	"github.com/kvrouter/kvrouter/simulation/traces"
)

// fleet replays requests through engines round-robin in virtual time, the simulator's inner loop
// (without a router), and returns the number of steps and KV events.
func fleet(b *testing.B, engines []*Engine, reqs []Request, at []float64) (steps, events int) {
	next := 0
	for {
		// The earliest engine step, or the next arrival if it comes first.
		best, bestT := -1, 0.0
		for i, e := range engines {
			if t, ok := e.NextEventTime(); ok && (best < 0 || t < bestT) {
				best, bestT = i, t
			}
		}
		if next < len(reqs) && (best < 0 || at[next] <= bestT) {
			if err := engines[next%len(engines)].Submit(reqs[next], at[next]); err != nil {
				b.Fatal(err)
			}
			next++
			continue
		}
		if best < 0 {
			return steps, events
		}
		r := engines[best].Step(bestT)
		steps++
		events += len(r.Events)
	}
}

func benchFleet(b *testing.B, reqs []Request, at []float64, workers int, opt Options) {
	b.ReportAllocs()
	var steps, events int
	for b.Loop() {
		engines := make([]*Engine, workers)
		for i := range engines {
			opt.Salt = uint64(i)
			engines[i] = mustNew(b, opt)
		}
		steps, events = fleet(b, engines, reqs, at)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/request")
	b.ReportMetric(float64(steps), "steps/run")
	b.ReportMetric(float64(events), "events/run")
}

func BenchmarkEngineSynthetic(b *testing.B) {
	reqs, at := randomWorkload(2000, 1, 16)
	benchFleet(b, reqs, at, 1, Options{NumBlocks: 2000})
}

// BenchmarkEngineMooncake replays the Mooncake conversation trace (12k requests) through 8 engines
// (block size 16, default capacity) round-robin.
func BenchmarkEngineMooncake(b *testing.B) {
	trs, err := traces.LoadMooncakeFile(traces.MooncakeConversation)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]Request, len(trs))
	at := make([]float64, len(trs))
	for i, r := range trs {
		local, seq := traces.BlockHashes(r, 16, "")
		reqs[i] = Request{ID: uint64(i), InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, SeqHashes: seq, LocalHashes: local}
		at[i] = float64(r.ArrivalMs)
	}
	benchFleet(b, reqs, at, 8, Options{})
}
