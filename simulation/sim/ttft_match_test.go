package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/simulation/engine"
	"github.com/kvrouter/kvrouter/simulation/traces"
)

// TestTTFTPolicyMatchesTTFTSim: the product's cost_model ttft (policy ttft: the memory store decides,
// books and calibrates at prefill_done) routes every request exactly as the simulator-side reference
// ttft-sim, and ttft-predict as ttft-sim-predict, on every generated workload kind under load (same seed,
// same random stream).
func TestTTFTPolicyMatchesTTFTSim(t *testing.T) {
	eng := engine.Options{BlockSize: 64}.WithDefaults()
	for _, kind := range []string{traces.WorkloadSharedPrefix, traces.WorkloadMultiTurn, traces.WorkloadFanout, traces.WorkloadMix} {
		reqs, err := traces.Generate(traces.GenerateOptions{Kind: kind, Requests: 600, Seed: 2})
		if err != nil {
			t.Fatal(err)
		}
		w := mustWorkload(t, reqs, LoadOptions{Rho: 1.5, EngineBlock: 64, Seed: 2}, eng, 4)
		cfg := Config{Workers: 4, Engine: eng, Seed: 2}.withDefaults()
		if err := cfg.validate(w); err != nil {
			t.Fatal(err)
		}
		for _, pair := range [][2]string{{PolicyTTFT, PolicyTTFTSim}, {PolicyTTFTPredict, PolicyTTFTSimPredict}} {
			t.Run(fmt.Sprintf("%s/%s", kind, pair[0]), func(t *testing.T) {
				var routed [2][]int32
				for j, p := range pair {
					r, err := newRun(context.Background(), cfg, w, p)
					if err != nil {
						t.Fatal(err)
					}
					if err := r.simulate(); err != nil {
						t.Fatal(err)
					}
					routed[j] = r.routedTo
				}
				used := map[int32]int{}
				for i := range routed[0] {
					if routed[0][i] != routed[1][i] {
						t.Fatalf("request %d of %d: %s routed to worker %d, %s to %d", i, len(routed[0]), pair[0], routed[0][i], pair[1], routed[1][i])
					}
					used[routed[0][i]]++
				}
				if len(routed[0]) != len(reqs) || len(used) != 4 || used[-1] > 0 {
					t.Fatalf("%d requests, routed per worker %v: not the comparison meant", len(routed[0]), used)
				}
			})
		}
	}
}
