package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/traces"
)

func loadTrace(t testing.TB, n int) []traces.Request {
	t.Helper()
	reqs, err := traces.LoadMooncakeFile(traces.MooncakeConversation)
	if err != nil {
		t.Fatal(err)
	}
	if n > 0 && n < len(reqs) {
		reqs = reqs[:n]
	}
	return reqs
}

func mustWorkload(t testing.TB, reqs []traces.Request, o LoadOptions, eng engine.Options, workers int) *Workload {
	t.Helper()
	w, err := NewWorkload("test", reqs, o, eng.WithDefaults(), workers)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func mustRun(t testing.TB, cfg Config, w *Workload) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg, w)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func jsonOf(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestDeterminism: the same seed gives byte-identical JSON for every policy (run in parallel);
// another seed changes Poisson arrivals and the random policy's choices.
func TestDeterminism(t *testing.T) {
	n := 300
	if testing.Short() {
		n = 120
	}
	reqs := loadTrace(t, n)
	eng := engine.Options{BlockSize: 64, NumBlocks: 2000} // a small cache: evictions happen
	build := func(seed uint64) (*Workload, []byte) {
		w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Rate: 20, Seed: seed}, eng, 4)
		cfg := Config{Workers: 4, Engine: eng, Seed: seed, Parallel: runtime.GOMAXPROCS(0), CheckEvents: true, EventDelayMs: 50}
		rep := mustRun(t, cfg, w)
		for _, p := range rep.Policies {
			if p.EventCheck != "ok" {
				t.Errorf("seed %d, %s: event check: %s", seed, p.Policy, p.EventCheck)
			}
			if p.Completed != n {
				t.Errorf("seed %d, %s: %d of %d requests completed", seed, p.Policy, p.Completed, n)
			}
		}
		return w, jsonOf(t, rep)
	}
	w1, a := build(1)
	_, b := build(1)
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different JSON:\n%s\n%s", a, b)
	}
	w2, c := build(2)
	if slices.Equal(w1.ArrivalMs, w2.ArrivalMs) {
		t.Error("seeds 1 and 2 gave the same Poisson arrivals")
	}
	if bytes.Equal(a, c) {
		t.Error("seeds 1 and 2 gave the same report")
	}
	// Trace timestamps use no randomness: the arrivals are the trace's, whatever the seed.
	x := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Speedup: 2, Seed: 1}, eng, 4)
	y := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Speedup: 2, Seed: 2}, eng, 4)
	if !slices.Equal(x.ArrivalMs, y.ArrivalMs) || x.ArrivalMs[len(reqs)-1] != float64(reqs[len(reqs)-1].ArrivalMs-reqs[0].ArrivalMs)/2 {
		t.Error("trace arrivals changed with the seed or were not scaled by the speedup")
	}
}

// TestRandomPolicySeeded: the random policy's choices follow the seed.
func TestRandomPolicySeeded(t *testing.T) {
	reqs := loadTrace(t, 60)
	eng := engine.Options{BlockSize: 512}
	w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 512, Speedup: 100}, eng, 8)
	choices := func(seed uint64) []int32 {
		cfg := Config{Workers: 8, Engine: eng, Seed: seed}.withDefaults()
		r, err := newRun(context.Background(), cfg, w, PolicyRandom)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.simulate(); err != nil {
			t.Fatal(err)
		}
		return r.routedTo
	}
	if a, b := choices(7), choices(7); !slices.Equal(a, b) {
		t.Error("same seed, different random choices")
	}
	if a, b := choices(7), choices(8); slices.Equal(a, b) {
		t.Error("different seeds, same random choices")
	}
}

// TestTTFTByHand: one worker, no reuse: TTFT is queueing plus prefill time from the cost model.
func TestTTFTByHand(t *testing.T) {
	// Distinct hash ids: nothing is ever reused.
	reqs := []traces.Request{
		{ArrivalMs: 0, InputTokens: 1000, OutputTokens: 1, HashIDs: []uint64{1, 2}},
		{ArrivalMs: 10, InputTokens: 2000, OutputTokens: 1, HashIDs: []uint64{3, 4, 5, 6}},
		{ArrivalMs: 1000, InputTokens: 10000, OutputTokens: 3, HashIDs: seqIDs(100, 20)},
	}
	eng := engine.Options{BlockSize: 16}.WithDefaults()
	w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 16}, eng, 1)
	for _, policy := range []string{PolicyRoundRobin, PolicyKV} {
		cfg := Config{Workers: 1, Engine: eng, Policies: []string{policy}}.withDefaults()
		r, err := newRun(context.Background(), cfg, w, policy)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.simulate(); err != nil {
			t.Fatal(err)
		}
		// Step cost: 6 ms + 0.025 ms per prefill token + 0.025 per decode + 0.00004 per context token.
		// Request 0 arrives at 0 on an idle engine: one step of 1000 prefill tokens.
		want0 := 6 + 0.025*1000
		// Request 1 arrives at 10 and waits for that step to end (queueing want0 − 10), then one step
		// of 2000 prefill tokens.
		want1 := (want0 - 10) + (6 + 0.025*2000)
		// Request 2 arrives at 1000 on an idle engine: 10000 tokens > the 8192-token budget, so two
		// chunks; the second attends to the first chunk's 8192 tokens of context.
		want2 := (6 + 0.025*8192) + (6 + 0.025*1808 + 0.00004*8192)
		for i, want := range []float64{want0, want1, want2} {
			got := r.firstMs[i] - w.ArrivalMs[i]
			if math.Abs(got-want) > 1e-9 {
				t.Errorf("%s: request %d TTFT %.6f ms, want %.6f", policy, i, got, want)
			}
		}
		// Request 2 then decodes two more tokens: steps of one decode over a context of 10000 and 10001.
		wantEnd := 1000 + want2 + (6 + 0.025 + 0.00004*10000) + (6 + 0.025 + 0.00004*10001)
		if math.Abs(r.finishMs[2]-wantEnd) > 1e-9 {
			t.Errorf("%s: request 2 finished at %.6f, want %.6f", policy, r.finishMs[2], wantEnd)
		}
		if res := r.result(); res.BlockHitRate != 0 || res.PrefillTokens != 13000 {
			t.Errorf("%s: hit rate %v, prefill tokens %d; want 0 and 13000", policy, res.BlockHitRate, res.PrefillTokens)
		}
	}
}

func seqIDs(from uint64, n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = from + uint64(i)
	}
	return ids
}

// TestInfiniteCacheReachesBound: one engine whose cache never fills reuses what the trace allows.
// Full run: the whole conversation trace at engine block 512 must reach its published bound, 36.64 %
// of blocks. The engine can never hit a trailing partial block, nor the last token of a prompt, so
// it may stay a hair below.
func TestInfiniteCacheReachesBound(t *testing.T) {
	n := 0
	if testing.Short() {
		n = 1500
	}
	reqs := loadTrace(t, n)
	eng := engine.Options{BlockSize: 512, NumBlocks: 400_000, MaxNumSeqs: 1024}
	w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 512, Speedup: 1}, eng, 1)
	rep := mustRun(t, Config{Workers: 1, Engine: eng, Policies: []string{PolicyRoundRobin}, CheckEvents: true}, w)
	got := rep.Policies[0]
	t.Logf("hit %.4f %% of blocks (bound %.4f %%), %.4f %% of tokens (bound %.4f %%)",
		100*got.BlockHitRate, 100*w.ReuseBlocks, 100*got.TokenHitRate, 100*w.ReuseTokens)
	if got.EvictedBlocks != 0 || got.EventCheck != "ok" {
		t.Fatalf("infinite cache evicted %d blocks (event check %s)", got.EvictedBlocks, got.EventCheck)
	}
	if got.BlockHitRate > w.ReuseBlocks+1e-12 || got.BlockHitRate < w.ReuseBlocks-0.003 {
		t.Errorf("block hit rate %.4f %%, want within 0.3 points below the bound %.4f %%", 100*got.BlockHitRate, 100*w.ReuseBlocks)
	}
	if n == 0 && math.Abs(100*w.ReuseBlocks-36.64) > 0.005 {
		t.Errorf("bound %.4f %%, want the published 36.64 %%", 100*w.ReuseBlocks)
	}
}

// TestEvictionOnlyUnderPressure: a cache larger than everything the trace stores never evicts; a
// small one does; either way every Stored block is later Removed or still resident.
func TestEvictionOnlyUnderPressure(t *testing.T) {
	n := 400
	if testing.Short() {
		n = 150
	}
	reqs := loadTrace(t, n)
	for _, tc := range []struct {
		blocks int
		evicts bool
	}{{200_000, false}, {3000, true}} {
		eng := engine.Options{BlockSize: 64, NumBlocks: tc.blocks}
		w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Speedup: 4}, eng, 2)
		rep := mustRun(t, Config{Workers: 2, Engine: eng, Policies: []string{PolicyKV, PolicyRoundRobin}, CheckEvents: true}, w)
		for _, p := range rep.Policies {
			if p.EventCheck != "ok" {
				t.Errorf("%d blocks, %s: %s", tc.blocks, p.Policy, p.EventCheck)
			}
			if (p.EvictedBlocks > 0) != tc.evicts {
				t.Errorf("%d blocks, %s: %d blocks evicted, want evictions %v", tc.blocks, p.Policy, p.EvictedBlocks, tc.evicts)
			}
			if p.StoredBlocks == 0 {
				t.Errorf("%d blocks, %s: nothing stored", tc.blocks, p.Policy)
			}
		}
	}
}

// TestRho0: ρ0 is the offered prompt tokens over the fleet's prefill capacity, and --rho hits it.
func TestRho0(t *testing.T) {
	reqs := loadTrace(t, 500)
	eng := engine.Options{BlockSize: 64}.WithDefaults()
	w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Rho: 0.8}, eng, 8)
	if got := w.Rho0(eng, 8); math.Abs(got-0.8) > 1e-9 {
		t.Errorf("rho0 %v, want 0.8", got)
	}
	n := float64(len(reqs))
	offered := float64(w.InputTokens) * (n - 1) / n / w.SpanMs
	capacity := 8 * 8192 / (6 + 0.025*8192)
	if got := w.Rho0(eng, 8); math.Abs(got-offered/capacity) > 1e-9 {
		t.Errorf("rho0 %v, want %v", got, offered/capacity)
	}
}

// TestChart: the demo chart renders as PNG and SVG from a small report.
func TestChart(t *testing.T) {
	reqs := loadTrace(t, 80)
	eng := engine.Options{BlockSize: 64}
	w := mustWorkload(t, reqs, LoadOptions{EngineBlock: 64, Speedup: 3}, eng, 2)
	rep := mustRun(t, Config{Workers: 2, Engine: eng, Policies: []string{PolicyKV, PolicyRoundRobin, PolicyOracleAlias}}, w)
	if got := rep.Policies[2].Policy; got != PolicyKVInstant {
		t.Errorf("the deprecated alias %q ran as %q, want %q", PolicyOracleAlias, got, PolicyKVInstant)
	}
	dir := t.TempDir()
	for _, name := range []string{"c.png", "c.svg"} {
		p := filepath.Join(dir, name)
		if err := WriteChart(p, []*Report{rep, rep}); err != nil {
			t.Fatal(err)
		}
		if st, err := os.Stat(p); err != nil || st.Size() < 1000 {
			t.Fatalf("%s: %v (%d bytes)", name, err, st.Size())
		}
	}
	if err := WriteChart(filepath.Join(dir, "c.gif"), []*Report{rep}); err == nil {
		t.Error("a .gif chart was accepted")
	}
}
