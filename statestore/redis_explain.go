package statestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

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
	req.Releases = nil // a route's only, as the memory store's Explain
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
		out := Explanation{RequestID: req.RequestID, RequiredBlocks: msgInt(arr[1]), Candidates: []Candidate{}}
		reasons, _ := arr[4].ToArray()
		urls, err := decodeCandidates(&out, msgStr(arr[5]))
		if err != nil {
			return Explanation{}, err
		}
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
		u, err := decodeCandidates(&out, msgStr(p[4]))
		if err != nil {
			return Explanation{}, err
		}
		urls = append(urls, u...)
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

// explainRowFixed is the fixed part of one packed candidate row (route.lua explain_rows' ROW_FMT: 7 u32,
// 5 f64, 2 u16, 2 u8).
const explainRowFixed = 7*4 + 5*8 + 2*2 + 2

// decodeCandidates appends route.lua's packed explain rows (explain_rows) to out and returns their urls.
func decodeCandidates(out *Explanation, blob string) ([]string, error) {
	var urls []string
	b := []byte(blob)
	u32 := func(o int) int { return int(binary.BigEndian.Uint32(b[o:])) }
	f64 := func(o int) float64 { return math.Float64frombits(binary.BigEndian.Uint64(b[o:])) }
	for o := 0; o < len(b); {
		if o+explainRowFixed > len(b) {
			return nil, fmt.Errorf("statestore: redis explain: truncated candidate row at byte %d", o)
		}
		wl, ul := int(binary.BigEndian.Uint16(b[o+68:])), int(binary.BigEndian.Uint16(b[o+70:]))
		rl, tc := int(b[o+72]), b[o+73] == 1
		end := o + explainRowFixed + wl + ul + rl
		if tc {
			end += 16
		}
		if end > len(b) {
			return nil, fmt.Errorf("statestore: redis explain: truncated candidate row at byte %d", o)
		}
		s := o + explainRowFixed
		c := Candidate{DPRank: u32(o), DeviceBlocks: u32(o + 4), HostBlocks: u32(o + 8), DiskBlocks: u32(o + 12),
			EventBlocks: u32(o + 16), PredictedBlocks: u32(o + 20), OverlapBlocks: u32(o + 24), Credit: f64(o + 28),
			ActivePrefillTokens: int64(f64(o + 36)), ActiveDecodeBlocks: int64(f64(o + 44)), ActiveRequests: int64(f64(o + 52)),
			Cost: f64(o + 60), WorkerID: blob[s : s+wl], Filtered: blob[s+wl+ul : s+wl+ul+rl]}
		urls = append(urls, blob[s+wl:s+wl+ul])
		if tc { // cost_model ttft: the coefficients the candidate was costed with
			t := s + wl + ul + rl
			c.TTFTCoeffs = &TTFTCoeffs{PrefillRate: f64(t), DecodeCoeff: f64(t + 8)}
		}
		out.Candidates = append(out.Candidates, c)
		o = end
	}
	return urls, nil
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
