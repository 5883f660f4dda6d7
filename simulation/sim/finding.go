package sim

import (
	"fmt"
	"strings"
)

// Gain compares kv with the best cache-blind policy of one report (the lowest mean TTFT among
// CacheBlindPolicies that ran).
type Gain struct {
	Rho0     float64
	Baseline string
	// TTFTMean and TTFTP99 are the baseline's TTFT over kv's (2 = kv's is half); HitRate is kv's
	// block hit rate over the baseline's (0 when the baseline hit nothing).
	TTFTMean, TTFTP99, HitRate float64
}

// KVGain returns kv's gain over the best cache-blind policy of rep; ok is false unless both ran
// and completed requests.
func (rep *Report) KVGain() (g Gain, ok bool) {
	kv := rep.Policy(PolicyKV)
	if kv == nil || kv.TTFT.Mean <= 0 || kv.TTFT.P99 <= 0 {
		return Gain{}, false
	}
	var best *PolicyResult
	for _, name := range CacheBlindPolicies {
		if p := rep.Policy(name); p != nil && p.TTFT.Mean > 0 && (best == nil || p.TTFT.Mean < best.TTFT.Mean) {
			best = p
		}
	}
	if best == nil {
		return Gain{}, false
	}
	g = Gain{Rho0: rep.Rho0, Baseline: best.Policy, TTFTMean: best.TTFT.Mean / kv.TTFT.Mean, TTFTP99: best.TTFT.P99 / kv.TTFT.P99}
	if best.BlockHitRate > 0 {
		g.HitRate = kv.BlockHitRate / best.BlockHitRate
	}
	return g, true
}

// sameWithin is the factor below which two TTFTs are called equal in a headline (5 %).
const sameWithin = 1.05

// Headline states what reps (load levels of one comparison) found, in one sentence for a reader
// who knows nothing of the simulator, e.g. "KV-aware routing cuts mean time to first token 2.5× vs
// the best cache-blind policy (least-loaded) at 55 % offered prefill load, 1.3× at 40 %". The level
// with the largest effect leads. Without kv and a cache-blind policy it names the fastest policy.
func Headline(reps []*Report) string {
	var gains []Gain
	for _, rep := range reps {
		if g, ok := rep.KVGain(); ok {
			gains = append(gains, g)
		}
	}
	if len(gains) == 0 {
		return fastestHeadline(reps)
	}
	lead := 0
	for i, g := range gains {
		if effect(g.TTFTMean) > effect(gains[lead].TTFTMean) {
			lead = i
		}
	}
	g := gains[lead]
	load := func(g Gain) string { return fmt.Sprintf("%.0f %%", 100*g.Rho0) }
	var b strings.Builder
	switch {
	case g.TTFTMean >= sameWithin:
		fmt.Fprintf(&b, "KV-aware routing cuts mean time to first token %s vs the best cache-blind policy (%s) at %s offered prefill load",
			times(g.TTFTMean), g.Baseline, load(g))
	case g.TTFTMean <= 1/sameWithin:
		fmt.Fprintf(&b, "KV-aware routing makes mean time to first token %s longer than the best cache-blind policy (%s) at %s offered prefill load",
			times(1/g.TTFTMean), g.Baseline, load(g))
	default:
		fmt.Fprintf(&b, "KV-aware routing matches the best cache-blind policy (%s) on mean time to first token at %s offered prefill load",
			g.Baseline, load(g))
	}
	for i, o := range gains {
		if i == lead {
			continue
		}
		switch {
		case o.TTFTMean >= sameWithin:
			fmt.Fprintf(&b, ", %s at %s", times(o.TTFTMean), load(o))
		case o.TTFTMean <= 1/sameWithin:
			fmt.Fprintf(&b, ", %s longer at %s", times(1/o.TTFTMean), load(o))
		default:
			fmt.Fprintf(&b, ", the same at %s", load(o))
		}
		if o.Baseline != g.Baseline {
			fmt.Fprintf(&b, " (vs %s)", o.Baseline)
		}
	}
	return b.String()
}

// effect is how far a ratio is from 1, either way.
func effect(r float64) float64 { return max(r, 1/r) }

// times formats a ratio ≥ 1: "2.5×", "12×".
func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}

// fastestHeadline names the policy with the lowest mean TTFT at the highest load.
func fastestHeadline(reps []*Report) string {
	if len(reps) == 0 {
		return "no results"
	}
	rep := reps[len(reps)-1]
	var best *PolicyResult
	for i := range rep.Policies {
		if p := &rep.Policies[i]; p.TTFT.Mean > 0 && (best == nil || p.TTFT.Mean < best.TTFT.Mean) {
			best = p
		}
	}
	if best == nil {
		return "no request completed"
	}
	return fmt.Sprintf("%s has the lowest mean time to first token (%s) at %.0f %% offered prefill load",
		best.Policy, secs(best.TTFT.Mean), 100*rep.Rho0)
}
