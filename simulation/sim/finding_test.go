package sim

import (
	"math"
	"testing"
)

// report builds a Report with the given policies' mean/p99 TTFT (ms) and block hit rates.
func report(rho float64, ps ...PolicyResult) *Report {
	return &Report{Rho0: rho, Policies: ps}
}

func pr(name string, mean, p99, hit float64) PolicyResult {
	p := PolicyResult{Policy: name, BlockHitRate: hit}
	p.TTFT.Mean, p.TTFT.P99 = mean, p99
	return p
}

func TestKVGain(t *testing.T) {
	rep := report(0.55, pr(PolicyKV, 600, 2700, 0.09), pr(PolicyRoundRobin, 9000, 45000, 0.058),
		pr(PolicyLeastLoaded, 1500, 9800, 0.056), pr(PolicyKVInstant, 100, 100, 0.5))
	g, ok := rep.KVGain()
	if !ok || g.Baseline != PolicyLeastLoaded || math.Abs(g.TTFTMean-2.5) > 1e-12 ||
		math.Abs(g.TTFTP99-9800.0/2700) > 1e-12 || math.Abs(g.HitRate-0.09/0.056) > 1e-12 {
		t.Fatalf("gain %+v ok %v: want least-loaded (the best cache-blind; kv-instant-events is no baseline), 2.5x", g, ok)
	}
	if _, ok := report(0.5, pr(PolicyKV, 1, 1, 0)).KVGain(); ok {
		t.Error("a gain without a cache-blind policy")
	}
	if _, ok := report(0.5, pr(PolicyRandom, 1, 1, 0)).KVGain(); ok {
		t.Error("a gain without kv")
	}
}

func TestHeadline(t *testing.T) {
	low := report(0.4, pr(PolicyKV, 480, 2300, 0.09), pr(PolicyLeastLoaded, 624, 3200, 0.05))
	high := report(0.55, pr(PolicyKV, 600, 2700, 0.09), pr(PolicyLeastLoaded, 1500, 9800, 0.05))
	same := report(0.3, pr(PolicyKV, 1000, 2000, 0.09), pr(PolicyRoundRobin, 1020, 2000, 0.05))
	worse := report(0.2, pr(PolicyKV, 1200, 2000, 0.09), pr(PolicyRoundRobin, 1000, 2000, 0.05))
	for _, c := range []struct {
		reps []*Report
		want string
	}{
		{[]*Report{low, high}, "KV-aware routing cuts mean time to first token 2.5× vs the best cache-blind policy (least-loaded) at 55 % offered prefill load, 1.3× at 40 %"},
		{[]*Report{same}, "KV-aware routing matches the best cache-blind policy (round-robin) on mean time to first token at 30 % offered prefill load"},
		{[]*Report{worse, same}, "KV-aware routing makes mean time to first token 1.2× longer than the best cache-blind policy (round-robin) at 20 % offered prefill load, the same at 30 %"},
		{[]*Report{high, worse}, "KV-aware routing cuts mean time to first token 2.5× vs the best cache-blind policy (least-loaded) at 55 % offered prefill load, 1.2× longer at 20 % (vs round-robin)"},
		{[]*Report{report(0.5, pr(PolicyRandom, 2000, 1, 0), pr(PolicyKVApprox, 1500, 1, 0))}, "kv-approx has the lowest mean time to first token (1.50 s) at 50 % offered prefill load"},
	} {
		if got := Headline(c.reps); got != c.want {
			t.Errorf("Headline:\n got %s\nwant %s", got, c.want)
		}
	}
}
