package sim

import (
	"math"
	"slices"
)

// Dist summarises a distribution, milliseconds.
type Dist struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// Latency summarises the router's wall-clock decision time, microseconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
}

// PolicyResult is what one policy achieved on the workload.
type PolicyResult struct {
	Policy    string `json:"policy"`
	Requests  int    `json:"requests"`
	Completed int    `json:"completed"`
	// Rejected requests could never fit in an engine's KV cache (counted in no latency).
	Rejected int `json:"rejected"`
	// BlockHitRate: prompt blocks found in the chosen engine's prefix cache at admission, over
	// Σ ceil(input / engine block) (the infinite-cache bound's denominator). TokenHitRate: cached
	// prompt tokens over prompt tokens.
	BlockHitRate float64 `json:"block_hit_rate"`
	TokenHitRate float64 `json:"token_hit_rate"`
	// BlockHitVsBound is BlockHitRate / the infinite-cache bound (Report.ReuseBound.Blocks).
	BlockHitVsBound float64 `json:"block_hit_vs_bound"`
	// TTFT: arrival to first token. ITL: per request, (finish − first token) / (output − 1), for
	// requests with more than one output token; Mean is token-weighted. E2E: arrival to last token.
	TTFT Dist `json:"ttft_ms"`
	ITL  struct {
		Mean float64 `json:"mean"`
		P99  float64 `json:"p99"`
	} `json:"itl_ms"`
	E2E Dist `json:"e2e_ms"`
	// Throughput over the makespan (first arrival to last finish).
	OutputTokS float64 `json:"output_tokens_per_s"`
	RequestsS  float64 `json:"requests_per_s"`
	MakespanS  float64 `json:"makespan_s"`
	// PrefillTokens is the prompt tokens the engines computed (recomputation after preemption included).
	PrefillTokens int64 `json:"prefill_tokens"`
	// LoadImbalance is max / mean busy time over workers (1 = perfectly even).
	LoadImbalance float64 `json:"load_imbalance"`
	BusyMeanS     float64 `json:"busy_mean_s"`
	Preemptions   int64   `json:"preemptions"`
	StoredBlocks  int64   `json:"stored_blocks"`
	EvictedBlocks int64   `json:"evicted_blocks"`
	// Events is the discrete events the run processed: arrivals, engine steps and deliveries to the
	// router (a step's first tokens and finishes, its KV event batches).
	Events int64 `json:"events"`
	// EventCheck is "ok" or the first inconsistency found (Config.CheckEvents); empty when not checked.
	EventCheck string `json:"event_check,omitempty"`
	// TTFTModel is the ttft policies' prediction quality and final coefficients (ttft, ttft-predict,
	// ttft-sim, ttft-sim-predict only).
	TTFTModel *TTFTModel `json:"ttft_model,omitempty"`
	// Decision is the router's wall-clock decision time (Config.Timing; never reproducible).
	Decision *Latency `json:"decision_us,omitempty"`

	decision Latency   // always measured, for the table
	ttfts    []float64 // sorted, for charts
}

// TTFTs returns the sorted TTFTs of completed requests, ms.
func (p *PolicyResult) TTFTs() []float64 { return p.ttfts }

// DecisionLatency returns the measured decision time even when it is left out of the JSON.
func (p *PolicyResult) DecisionLatency() Latency { return p.decision }

// dist summarises xs, sorting it in place.
func dist(xs []float64) Dist {
	if len(xs) == 0 {
		return Dist{}
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return Dist{Mean: sum / float64(len(xs)), P50: quantile(xs, 0.5), P90: quantile(xs, 0.9), P99: quantile(xs, 0.99), Max: xs[len(xs)-1]}
}

// quantile of sorted xs: the nearest-rank value (no interpolation).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(xs)))) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// result computes the run's metrics.
func (r *run) result() PolicyResult {
	w := r.w
	res := PolicyResult{Policy: r.policy, Requests: len(w.Reqs), Rejected: r.rejected, PrefillTokens: r.prefillTok,
		Preemptions: r.preemptions, StoredBlocks: r.stored, EvictedBlocks: r.evicted, Events: r.events}
	var ttft, e2e, itl []float64
	var hitTok, hitBlocks int64
	var itlSum, itlTok float64
	first, last := w.ArrivalMs[0], w.ArrivalMs[0]
	bs := int64(w.EngineBlock)
	for i, req := range w.Reqs {
		if math.IsNaN(r.finishMs[i]) {
			continue
		}
		res.Completed++
		hitTok += int64(r.cachedTok[i])
		hitBlocks += int64(r.cachedTok[i]) / bs
		ttft = append(ttft, r.firstMs[i]-w.ArrivalMs[i])
		e2e = append(e2e, r.finishMs[i]-w.ArrivalMs[i])
		last = max(last, r.finishMs[i])
		if req.OutputTokens > 1 {
			d := r.finishMs[i] - r.firstMs[i]
			itl = append(itl, d/float64(req.OutputTokens-1))
			itlSum += d
			itlTok += float64(req.OutputTokens - 1)
		}
		res.OutputTokS += float64(req.OutputTokens)
	}
	if w.BlockRefs > 0 {
		res.BlockHitRate = float64(hitBlocks) / float64(w.BlockRefs)
	}
	if w.InputTokens > 0 {
		res.TokenHitRate = float64(hitTok) / float64(w.InputTokens)
	}
	if w.ReuseBlocks > 0 {
		res.BlockHitVsBound = res.BlockHitRate / w.ReuseBlocks
	}
	res.TTFT, res.E2E = dist(ttft), dist(e2e)
	res.ttfts = ttft
	if itlTok > 0 {
		res.ITL.Mean = itlSum / itlTok
		res.ITL.P99 = dist(itl).P99
	}
	res.MakespanS = (last - first) / 1000
	if res.MakespanS > 0 {
		res.OutputTokS /= res.MakespanS
		res.RequestsS = float64(res.Completed) / res.MakespanS
	} else {
		res.OutputTokS = 0
	}
	busyMax, busySum := 0.0, 0.0
	for _, sw := range r.workers {
		busyMax = max(busyMax, sw.busyMs)
		busySum += sw.busyMs
	}
	if busySum > 0 {
		res.LoadImbalance = busyMax / (busySum / float64(len(r.workers)))
		res.BusyMeanS = busySum / float64(len(r.workers)) / 1000
	}
	if r.ttft != nil {
		res.TTFTModel = r.ttft.model(r.cfg.TTFTWarmup)
	}
	if r.track != nil {
		res.TTFTModel = r.track.model(r.cfg.TTFTWarmup, r.track.final)
	}
	if r.cfg.CheckEvents {
		res.EventCheck = "ok"
		if r.checkErr != nil {
			res.EventCheck = r.checkErr.Error()
		}
	}
	ns := make([]float64, len(r.decisionNs))
	for i, d := range r.decisionNs {
		ns[i] = float64(d) / 1e3
	}
	d := dist(ns)
	res.decision = Latency{Mean: d.Mean, P50: d.P50, P99: d.P99}
	if r.cfg.Timing {
		l := res.decision
		res.Decision = &l
	}
	return res
}
