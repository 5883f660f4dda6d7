package statestore

import "math"

// This file holds the decision rules (SPEC §6.2, §6.3) as pure functions over candidate numbers. The
// memory store calls them; luascripts/route.lua implements the very same arithmetic, in the same
// order of floating-point operations, so that both stores pick identically. Change both together.

// JumpStride is the first window of the prefix jump search (SPEC §5): a lookup probes the end of windows
// of JumpStride, 2·JumpStride, 4·JumpStride, … positions and binary-searches back only where the set of
// matching workers shrinks (memory_overlap.go jumpDepths; route.lua jump_depths).
const JumpStride = 32

// RequiredBlocks is ceil(isl / blockSize).
func RequiredBlocks(isl int64, blockSize int) int64 {
	bs := int64(blockSize)
	return (isl + bs - 1) / bs
}

// Overlap is one candidate's matched prefix, split by the best tier each block is held in.
type Overlap struct {
	Device, Host, Disk int // event-derived blocks by best tier (they add up to Event)
	Event              int // event-derived depth
	Soft               int // approximate/predicted depth
}

// Effective returns the overlap used for scoring: where the soft (approximate/predicted) depth is
// deeper than the event depth, the extra blocks count as device blocks.
func (o Overlap) Effective() (device, host, disk, depth int) {
	device, host, disk, depth = o.Device, o.Host, o.Disk, o.Event
	if o.Soft > o.Event {
		device += o.Soft - o.Event
		depth = o.Soft
	}
	return
}

// Load is one candidate's booked load.
type Load struct {
	PrefillTokens int64
	DecodeBlocks  int64
	Requests      int64
}

// CostInput is everything the cost of one candidate depends on.
type CostInput struct {
	Cfg            PoolConfig // with the request's overrides applied
	ISL            int64      // prompt tokens
	RequiredBlocks int64
	MinPrefill     int64 // min active_prefill_tokens over the eligible candidates
	Overlap        Overlap
	Load           Load
}

// Cost computes Dynamo's cost (lower wins) and the credit it granted, in this exact operation order:
//
//	decay  = 1 / (1 + d · (max(prefill − minPrefill, 0) / bs) / required)  (1 when d = 0 or required = 0)
//	credit = c · decay · device + hw · host + dw · disk
//	raw    = (prefill + isl) / bs
//	cost   = scale · max(raw − credit, 0) + (decode + required) + rw · requests
func Cost(in CostInput) (cost, credit float64) {
	bs := float64(in.Cfg.BlockSize)
	dev, host, disk, _ := in.Overlap.Effective()
	decay := 1.0
	if in.Cfg.OverlapScoreCreditDecay > 0 && in.RequiredBlocks > 0 {
		excess := in.Load.PrefillTokens - in.MinPrefill
		if excess < 0 { // a filtered candidate (explain) may be below the eligible minimum: no bonus, no 1/0
			excess = 0
		}
		decay = 1 / (1 + in.Cfg.OverlapScoreCreditDecay*(float64(excess)/bs)/float64(in.RequiredBlocks))
	}
	credit = in.Cfg.OverlapScoreCredit*decay*float64(dev) + in.Cfg.HostCacheHitWeight*float64(host) + in.Cfg.DiskCacheHitWeight*float64(disk)
	raw := float64(in.Load.PrefillTokens+in.ISL) / bs
	prefill := raw - credit
	if prefill < 0 {
		prefill = 0
	}
	cost = in.Cfg.PrefillLoadScale*prefill + float64(in.Load.DecodeBlocks+in.RequiredBlocks) + in.Cfg.DecodeActiveRequestWeight*float64(in.Load.Requests)
	return cost, credit
}

// BookedPrefill is the prefill tokens a decision books: max(isl − device_overlap · bs, 0).
func BookedPrefill(isl int64, deviceBlocks int, blockSize int) int64 {
	v := isl - int64(deviceBlocks)*int64(blockSize)
	if v < 0 {
		return 0
	}
	return v
}

// Pick chooses among eligible costs (ordered by worker id, then dp rank) with the caller's random
// number r ∈ [0,1) (SPEC §6.3). Temperature 0: the minimum; among k tied minima, index floor(r·k).
// Temperature T > 0: softmax sampling over normalised costs, p_i ∝ exp(−(c_i − c_min)/((c_max − c_min)·T)),
// uniform when all costs are equal; the first i whose cumulative probability exceeds r, else the last.
// It returns -1 when costs is empty.
func Pick(costs []float64, temperature, r float64) int {
	n := len(costs)
	if n == 0 {
		return -1
	}
	cmin, cmax := costs[0], costs[0]
	for _, c := range costs[1:] {
		cmin = math.Min(cmin, c)
		cmax = math.Max(cmax, c)
	}
	if temperature <= 0 {
		k := 0
		for _, c := range costs {
			if c == cmin {
				k++
			}
		}
		want := int(math.Floor(r * float64(k)))
		if want >= k {
			want = k - 1
		}
		for i, c := range costs {
			if c == cmin {
				if want == 0 {
					return i
				}
				want--
			}
		}
		return n - 1 // unreachable
	}
	if cmax == cmin {
		i := int(math.Floor(r * float64(n)))
		if i >= n {
			i = n - 1
		}
		return i
	}
	w, total := softmaxWeights(costs, cmin, cmax, temperature)
	cum := 0.0
	for i := range w {
		cum += w[i] / total
		if cum > r {
			return i
		}
	}
	return n - 1
}

// softmaxWeights are Pick's unnormalised softmax weights exp(−(c_i − c_min)/((c_max − c_min)·T)) and
// their sum (cmax > cmin, T > 0).
func softmaxWeights(costs []float64, cmin, cmax, temperature float64) (w []float64, total float64) {
	span := (cmax - cmin) * temperature
	w = make([]float64, len(costs))
	for i, c := range costs {
		w[i] = Exp(-(c - cmin) / span)
		total += w[i]
	}
	return w, total
}

// CostTerms are the terms of one candidate's cost (SPEC §6.2), so that an explanation can be checked by
// eye: cost = prefill_term + decode_blocks + request_term.
type CostTerms struct {
	// PrefillBlocks is (active_prefill_tokens + isl) / block_size: the prefill work before credit.
	PrefillBlocks float64 `json:"prefill_blocks"`
	// PrefillBlocksAfterCredit is max(prefill_blocks − credit, 0).
	PrefillBlocksAfterCredit float64 `json:"prefill_blocks_after_credit"`
	// PrefillTerm is prefill_load_scale × prefill_blocks_after_credit.
	PrefillTerm float64 `json:"prefill_term"`
	// DecodeBlocks is active_decode_blocks + required_blocks (weight 1).
	DecodeBlocks int64 `json:"decode_blocks"`
	// RequestTerm is decode_active_request_weight × active_requests.
	RequestTerm float64 `json:"request_term"`
}

// TieBreak says how the pick among the eligible candidates was made (SPEC §6.3).
type TieBreak struct {
	// Rule is "min" (temperature 0: the minimum cost; among tied minima the random number picks),
	// "softmax" (temperature > 0: sampled) or "session" (a live session binding chose; nothing drawn).
	Rule string `json:"rule"`
	// Random is the request's uniform number in [0,1).
	Random float64 `json:"random"`
	// Temperature is the one applied (the pool's, or the request's override); 0 for "min".
	Temperature float64 `json:"temperature,omitempty"`
	// Eligible counts the candidates that were not filtered.
	Eligible int `json:"eligible"`
	// Tied ("min") counts the eligible candidates at the minimum cost.
	Tied int `json:"tied,omitempty"`
	// Index is the chosen one's position among the tied ("min": floor(random × tied)) or among the
	// eligible ("softmax", "session"), counting from 0 in worker then dp_rank order.
	Index int `json:"index"`
	// Probabilities ("softmax") are, per eligible candidate in order, the chance of being picked: the
	// chosen one is the first whose cumulative probability exceeds random.
	Probabilities []float64 `json:"probabilities,omitempty"`
}

// ExplainCosts adds to an explanation what its costs are made of: every candidate's cost terms and the
// tie-break that picked among the eligible ones. cfg is the pool's config with the request's overrides
// applied. Both stores call it on the explanation they computed, so their output stays identical; the
// arithmetic is Cost's, in the same operation order, so the terms add up to the cost exactly.
func ExplainCosts(ex *Explanation, cfg PoolConfig, req *RouteRequest) {
	bs := float64(cfg.BlockSize)
	var costs []float64
	chosen := -1
	for i := range ex.Candidates {
		c := &ex.Candidates[i]
		if cfg.TTFT() && c.TTFTCoeffs != nil {
			t := TTFTCandidate(*c.TTFTCoeffs, req.ISL, c.DeviceBlocks, cfg.BlockSize,
				Load{PrefillTokens: c.ActivePrefillTokens, DecodeBlocks: c.ActiveDecodeBlocks})
			c.TTFTTerms = &t
		} else {
			c.Terms = explainTerms(c, cfg, req, ex.RequiredBlocks, bs)
		}
		if c.Filtered != "" {
			continue
		}
		if d := ex.Decision; d != nil && d.WorkerID == c.WorkerID && d.DPRank == c.DPRank {
			chosen = len(costs)
		}
		costs = append(costs, c.Cost)
	}
	if chosen < 0 {
		return
	}
	tb := &TieBreak{Rule: "min", Random: req.Random, Eligible: len(costs), Index: chosen}
	ex.TieBreak = tb
	if ex.Decision.SessionHit {
		tb.Rule = "session"
		return
	}
	cmin, cmax := costs[0], costs[0]
	for _, c := range costs[1:] {
		cmin = math.Min(cmin, c)
		cmax = math.Max(cmax, c)
	}
	if cfg.Temperature <= 0 {
		tb.Index = 0
		for i, c := range costs {
			if c == cmin {
				if i < chosen {
					tb.Index++
				}
				tb.Tied++
			}
		}
		return
	}
	tb.Rule, tb.Temperature = "softmax", cfg.Temperature
	tb.Probabilities = make([]float64, len(costs))
	if cmax == cmin {
		for i := range costs {
			tb.Probabilities[i] = 1 / float64(len(costs))
		}
		return
	}
	w, total := softmaxWeights(costs, cmin, cmax, cfg.Temperature)
	for i := range w {
		tb.Probabilities[i] = w[i] / total
	}
}

// explainTerms are a dynamo candidate's cost terms, in Cost's operation order.
func explainTerms(c *Candidate, cfg PoolConfig, req *RouteRequest, required int64, bs float64) *CostTerms {
	t := &CostTerms{PrefillBlocks: float64(c.ActivePrefillTokens+req.ISL) / bs}
	t.PrefillBlocksAfterCredit = t.PrefillBlocks - c.Credit
	if t.PrefillBlocksAfterCredit < 0 {
		t.PrefillBlocksAfterCredit = 0
	}
	t.PrefillTerm = cfg.PrefillLoadScale * t.PrefillBlocksAfterCredit
	t.DecodeBlocks = c.ActiveDecodeBlocks + required
	t.RequestTerm = cfg.DecodeActiveRequestWeight * float64(c.ActiveRequests)
	return t
}

// Exp is e**x computed with plain IEEE double operations in a fixed order (the algorithm of Go's
// portable math.exp: FreeBSD's e_exp.c). The softmax uses it instead of math.Exp because math.Exp is
// implemented in assembly on amd64 (with or without FMA depending on the CPU) and so is not bit-exact
// across machines, and luascripts/route.lua must reproduce the very same bits with Lua arithmetic.
// Every product is rounded explicitly (float64(...)) so the compiler never fuses a multiply-add.
func Exp(x float64) float64 {
	const (
		ln2Hi     = 6.93147180369123816490e-01
		ln2Lo     = 1.90821492927058770002e-10
		log2e     = 1.44269504088896338700e+00
		overflow  = 7.09782712893383973096e+02
		underflow = -7.45133219101941108420e+02
		nearZero  = 1.0 / (1 << 28)
		p1        = 1.66666666666666657415e-01
		p2        = -2.77777777770155933842e-03
		p3        = 6.61375632143793436117e-05
		p4        = -1.65339022054652515390e-06
		p5        = 4.13813679705723846039e-08
	)
	switch {
	case math.IsNaN(x) || math.IsInf(x, 1):
		return x
	case math.IsInf(x, -1):
		return 0
	case x > overflow:
		return math.Inf(1)
	case x < underflow:
		return 0
	case -nearZero < x && x < nearZero:
		return 1 + x
	}
	var k float64
	switch {
	case x < 0:
		k = math.Ceil(float64(log2e*x) - 0.5)
	case x > 0:
		k = math.Floor(float64(log2e*x) + 0.5)
	}
	hi := x - float64(k*ln2Hi)
	lo := float64(k * ln2Lo)
	r := hi - lo
	t := float64(r * r)
	poly := p4 + float64(t*p5)
	poly = p3 + float64(t*poly)
	poly = p2 + float64(t*poly)
	poly = p1 + float64(t*poly)
	c := r - float64(t*poly)
	y := 1 - ((lo - float64(r*c)/(2-c)) - hi)
	return math.Ldexp(y, int(k))
}
