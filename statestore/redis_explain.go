package statestore

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

// ExplainPageCandidates is the most roster candidates (dp ranks) one explain call of the Redis store
// reports (SPEC §8: every script call does bounded work; docs/REDIS.md "Paged explain"). A pool of at
// most this many ranks is explained in one call, one atomic snapshot; a larger one in a head call (the
// decision, through route's own path) and one call per page of this many candidates.
const ExplainPageCandidates = 128

// explainAttempts bounds the paged explains tried when the roster changes between their calls; after
// that many Explain fails with ErrConflict.
const explainAttempts = 3

// explainPaging returns the page size (r.explainPage, a test knob; 0 = ExplainPageCandidates).
func (r *Redis) explainPaging() int {
	if r.explainPage > 0 {
		return r.explainPage
	}
	return ExplainPageCandidates
}

// errRosterChanged: a page's roster stamp or size is not the head's (a worker registered, removed or
// changed between the calls).
var errRosterChanged = fmt.Errorf("%w: the pool's roster changed during a paged explain", ErrConflict)

// Explain implements Store: route.lua in mode explain with the page size; on a larger roster the head
// reply is followed by explain_page calls, assembled here into the one-call form's Explanation (Pages
// and Snapshot say it was not one snapshot). A roster change between the calls is retried from the head,
// explainAttempts times in all, then reported as ErrConflict (never a duplicated or missing candidate).
func (r *Redis) Explain(ctx context.Context, req RouteRequest) (Explanation, error) {
	if err := CheckID("pool", req.Pool); err != nil {
		return Explanation{}, unknownPool(req.Pool)
	}
	if err := r.preValidate(ctx, &req); err != nil {
		return Explanation{}, err
	}
	var out Explanation
	var err error
	for attempt := 0; attempt < explainAttempts; attempt++ {
		out, err = r.explainOnce(ctx, &req)
		if err != errRosterChanged {
			break
		}
	}
	if err == errRosterChanged {
		return Explanation{}, fmt.Errorf("statestore: redis explain of pool %q, %d attempts: %w", req.Pool, explainAttempts, err)
	}
	if err != nil {
		return Explanation{}, err
	}
	// The knobs of the cost terms: a second read, not atomic with the script's; an explanation is a
	// diagnostic and a knob change between the two calls is visible as terms that do not add up.
	cfg, err := r.GetPool(ctx, req.Pool)
	if err != nil {
		return Explanation{}, err
	}
	ExplainCosts(&out, req.Overrides.Apply(cfg), &req)
	return out, nil
}

// explainOnce is one explain: the one-call form, or a head and its pages (errRosterChanged when a page
// saw another roster than the head).
func (r *Redis) explainOnce(ctx context.Context, req *RouteRequest) (Explanation, error) {
	page := r.explainPaging()
	args := append(routeArgs("explain", req), fmt.Sprint(page))
	arr, err := r.exec(ctx, luascripts.Route, req.Pool, args)
	if err != nil {
		return Explanation{}, err
	}
	switch msgStr(arr[0]) {
	case "unknown_pool":
		return Explanation{}, unknownPool(req.Pool)
	case "invalid":
		return Explanation{}, r.exactInvalid(ctx, req)
	case "explain":
		out := Explanation{RequestID: req.RequestID, RequiredBlocks: msgInt(arr[1])}
		reasons, _ := arr[4].ToArray()
		cands, _ := arr[5].ToArray()
		urls := decodeCandidates(&out, cands)
		explainDecision(&out, req, int(msgInt(arr[2])), msgInt(arr[3]) == 1, noEligible(req.Pool, reasons).Reasons, urls)
		return out, nil
	case "head":
	default:
		return Explanation{}, fmt.Errorf("statestore: redis explain: unexpected reply %q", msgStr(arr[0]))
	}
	// {'head', stamp, N, required, chosen, session_hit, minPrefill, fast}
	stamp, n := msgStr(arr[1]), msgInt(arr[2])
	if msgInt(arr[7]) == 1 {
		r.fastHeads.Add(1)
	}
	out := Explanation{RequestID: req.RequestID, RequiredBlocks: msgInt(arr[3]), Candidates: make([]Candidate, 0, n)}
	chosen, hit, minPrefill := int(msgInt(arr[4])), msgInt(arr[5]) == 1, msgStr(arr[6])
	reasons := map[string]int{}
	var urls []string
	for a := int64(1); a <= n; a += int64(page) {
		if a > 1 && r.explainBetween != nil {
			r.explainBetween(int((a - 1) / int64(page)))
		}
		b := min(a+int64(page)-1, n)
		args := append(routeArgs("explain_page", req), istr(a), istr(b), minPrefill)
		p, err := r.exec(ctx, luascripts.Route, req.Pool, args)
		if err != nil {
			return Explanation{}, err
		}
		switch msgStr(p[0]) {
		case "unknown_pool": // deleted since the head
			return Explanation{}, unknownPool(req.Pool)
		case "page":
		default:
			return Explanation{}, fmt.Errorf("statestore: redis explain page: unexpected reply %q", msgStr(p[0]))
		}
		// {'page', stamp, N, {reason, count, ...}, {candidate ...}}
		if msgStr(p[1]) != stamp || msgInt(p[2]) != n {
			return Explanation{}, errRosterChanged
		}
		rs, _ := p[3].ToArray()
		for k, v := range noEligible(req.Pool, rs).Reasons {
			reasons[k] += v
		}
		cands, _ := p[4].ToArray()
		urls = append(urls, decodeCandidates(&out, cands)...)
		out.Pages++
	}
	if int64(len(out.Candidates)) != n {
		return Explanation{}, errRosterChanged
	}
	if out.Pages > 1 {
		out.Snapshot = new(bool)
	}
	explainDecision(&out, req, chosen, hit, reasons, urls)
	return out, nil
}

// decodeCandidates appends route.lua's explain candidate rows to out and returns their urls.
func decodeCandidates(out *Explanation, cands []rueidis.RedisMessage) []string {
	urls := make([]string, len(cands))
	for i, cm := range cands {
		v, _ := cm.ToArray()
		c := Candidate{WorkerID: msgStr(v[0]), DPRank: int(msgInt(v[1])), DeviceBlocks: int(msgInt(v[2])),
			HostBlocks: int(msgInt(v[3])), DiskBlocks: int(msgInt(v[4])), EventBlocks: int(msgInt(v[5])),
			PredictedBlocks: int(msgInt(v[6])), OverlapBlocks: int(msgInt(v[7])), Credit: msgFloat(v[8]),
			ActivePrefillTokens: msgInt(v[9]), ActiveDecodeBlocks: msgInt(v[10]), ActiveRequests: msgInt(v[11]),
			Cost: msgFloat(v[12]), Filtered: msgStr(v[13])}
		if len(v) > 14 {
			urls[i] = msgStr(v[14])
		}
		if len(v) > 16 { // cost_model ttft: the coefficients the candidate was costed with
			c.TTFTCoeffs = &TTFTCoeffs{PrefillRate: msgFloat(v[15]), DecodeCoeff: msgFloat(v[16])}
		}
		out.Candidates = append(out.Candidates, c)
	}
	return urls
}

// explainDecision sets the decision (candidate chosen, 0-based; -1: none, then the error with the
// reason counts).
func explainDecision(out *Explanation, req *RouteRequest, chosen int, hit bool, reasons map[string]int, urls []string) {
	if chosen < 0 || chosen >= len(out.Candidates) {
		e := &NoEligibleError{Pool: req.Pool, Reasons: reasons}
		out.Error = &ErrorBody{Code: ErrorCode(e), Message: e.Error()}
		return
	}
	c := out.Candidates[chosen]
	out.Decision = &Decision{RequestID: req.RequestID, WorkerID: c.WorkerID, DPRank: c.DPRank, URL: urls[chosen],
		OverlapBlocks: c.OverlapBlocks, RequiredBlocks: out.RequiredBlocks, Cost: c.Cost, SessionHit: hit}
}
