package statestore

import (
	"container/heap"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
)

// validateRoute checks what every store requires of a route request.
func validateRoute(req *RouteRequest, cfg PoolConfig) error {
	if err := CheckID("request_id", req.RequestID); err != nil {
		return err
	}
	if len(req.SessionID) > MaxIDLength {
		return fmt.Errorf("%w: session_id longer than %d bytes", ErrInvalid, MaxIDLength)
	}
	if req.ISL < 0 || req.ISL > cfg.MaxPromptTokens {
		return fmt.Errorf("%w: prompt of %d tokens outside [0, max_prompt_tokens=%d]", ErrInvalid, req.ISL, cfg.MaxPromptTokens)
	}
	if int64(len(req.SeqHashes)) > req.ISL/int64(cfg.BlockSize) {
		return fmt.Errorf("%w: %d block hashes but isl %d holds only %d full blocks of %d tokens",
			ErrInvalid, len(req.SeqHashes), req.ISL, req.ISL/int64(cfg.BlockSize), cfg.BlockSize)
	}
	if len(req.AllowedWorkers) > MaxWorkersPerPool {
		return fmt.Errorf("%w: allowed_workers lists more than %d workers", ErrInvalid, MaxWorkersPerPool)
	}
	if len(req.ExcludedWorkers) > MaxWorkersPerPool {
		return fmt.Errorf("%w: excluded_workers lists more than %d workers", ErrInvalid, MaxWorkersPerPool)
	}
	for i, w := range req.ExcludedWorkers {
		if err := CheckID(fmt.Sprintf("excluded_workers[%d]", i), w); err != nil {
			return err
		}
	}
	if len(req.Releases) > MaxRouteReleases {
		return fmt.Errorf("%w: %d releases in one route (at most %d)", ErrInvalid, len(req.Releases), MaxRouteReleases)
	}
	for i, id := range req.Releases {
		if err := CheckID(fmt.Sprintf("releases[%d]", i), id); err != nil {
			return err
		}
	}
	if math.IsNaN(req.Random) || req.Random < 0 || req.Random >= 1 {
		return fmt.Errorf("%w: random must be in [0,1), got %v", ErrInvalid, req.Random)
	}
	return req.Overrides.Validate()
}

// overlapList returns, in sc.list, the overlap of every rank that holds a prefix of the query (event or
// soft), each slot once, in no particular order. The slice is sc's: valid until sc is reused.
func (p *memPool) overlapList(seq []uint64, now int64, sc *lookupScratch) []slotOverlap {
	sc.eh = eventHolders{p: p, seq: seq, lastI: -1, buf: sc.eh.buf[:0]}
	ev := jumpDepths(&sc.eh, len(seq), sc.depths[:0], &sc.jump)
	if len(seq) > 0 {
		// Ranks with orphans are walked linearly; only those holding the first block can match, so
		// only its holders are looked at (not every rank of the pool).
		if be := p.events.entry(seq[0]); be != nil {
			var orphaned []*rankIndex
			for j := 0; j < be.count(); j++ {
				h := p.events.holderAt(seq[0], be, j)
				if r := p.slots[h.slot]; h.tiers != 0 && r != nil && r.idx.orphans > 0 {
					orphaned = append(orphaned, r.idx)
				}
			}
			for _, ri := range orphaned { // the entry pointer is not used across lookups
				if d := linearDepth(p.events, ri, seq); d > 0 {
					ev = append(ev, slotDepth{ri.slot, d})
				}
			}
		}
	}
	sc.depths = ev
	out := sc.list[:0]
	for _, sd := range ev {
		dev, host, disk := tierSplit(p.events, p.slots[sd.slot].idx, seq, sd.depth)
		out = append(out, slotOverlap{sd.slot, Overlap{Device: dev, Host: host, Disk: disk, Event: sd.depth}})
	}
	if len(p.soft) > 0 {
		soft := jumpDepths(&softHolders{sx: p.soft, seq: seq, now: now, live: p.liveSlot}, len(seq), nil, &sc.jump)
		for _, sd := range soft {
			i := slices.IndexFunc(out, func(o slotOverlap) bool { return o.slot == sd.slot })
			if i < 0 {
				out, i = append(out, slotOverlap{slot: sd.slot}), len(out)
			}
			out[i].ov.Soft = sd.depth
		}
	}
	sc.list = out
	return out
}

// slotOverlap is one slot's overlap with a query.
type slotOverlap struct {
	slot slotID
	ov   Overlap
}

// lookupScratch is the working memory of one overlap lookup, reused through lookupScratchPool: a lookup
// otherwise makes ~8 small allocations, which were a third of a warm lookup's time
// (BenchmarkMemoryOverlapOneHolder). Lookups run concurrently under the pool's read lock, so the
// scratch is per call, not per pool.
type lookupScratch struct {
	eh     eventHolders
	jump   jumpScratch
	depths []slotDepth
	list   []slotOverlap
}

var lookupScratchPool = sync.Pool{New: func() any { return new(lookupScratch) }}

// overlaps returns every rank's overlap with the query (absent: 0), keyed by slot.
func (p *memPool) overlaps(seq []uint64, now int64) map[slotID]Overlap {
	sc := lookupScratchPool.Get().(*lookupScratch)
	defer lookupScratchPool.Put(sc)
	list := p.overlapList(seq, now, sc)
	out := make(map[slotID]Overlap, len(list))
	for _, o := range list {
		out[o.slot] = o.ov
	}
	return out
}

// Overlap implements Store.
func (m *Memory) Overlap(_ context.Context, pool string, seq []uint64, now int64) ([]Score, error) {
	p, err := m.pool(pool)
	if err != nil {
		return nil, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	sc := lookupScratchPool.Get().(*lookupScratch)
	defer lookupScratchPool.Put(sc)
	held := sc.list[:0] // filtered in place: the ranks holding some prefix, in candidate order
	for _, o := range p.overlapList(seq, now, sc) {
		if _, _, _, d := o.ov.Effective(); d > 0 {
			held = append(held, o)
		}
	}
	slices.SortFunc(held, func(a, b slotOverlap) int { return rankCmp(p.slots[a.slot], p.slots[b.slot]) })
	var out []Score // nil when nothing is held
	if len(held) > 0 {
		out = make([]Score, len(held))
	}
	for i, o := range held {
		r := p.slots[o.slot]
		_, _, _, d := o.ov.Effective()
		out[i] = Score{WorkerID: r.worker.spec.WorkerID, DPRank: r.rank, Blocks: d}
	}
	return out, nil
}

// attached reports whether r is still a registered rank of this pool.
func (p *memPool) attached(r *memRank) bool {
	w := p.workers[r.worker.spec.WorkerID]
	return w == r.worker && r.rank < len(w.ranks) && w.ranks[r.rank] == r
}

type evalCand struct {
	rank   *memRank
	ov     Overlap
	reason string
	cost   float64
	credit float64
	coeffs TTFTCoeffs // cost_model ttft: the coefficients cost used
}

// evaluation is a decision computed but not yet booked.
type evaluation struct {
	cfg      PoolConfig
	required int64
	cands    []evalCand
	chosen   int // index into cands, -1 when nothing is eligible
	session  bool
	reasons  map[string]int
}

// idSet returns the ids as a set, nil when there are none.
func idSet(ids []string) map[string]bool {
	if len(ids) == 0 {
		return nil
	}
	set := make(map[string]bool, len(ids))
	for _, id := range ids {
		set[id] = true
	}
	return set
}

// routeFilter is SPEC §6.3 step 1 for one request.
type routeFilter struct {
	cfg               *PoolConfig // with the request's overrides applied
	allowed, excluded map[string]bool
	pinned            string
}

func newRouteFilter(req *RouteRequest, cfg *PoolConfig) routeFilter {
	return routeFilter{cfg: cfg, allowed: idSet(req.AllowedWorkers), excluded: idSet(req.ExcludedWorkers), pinned: req.PinnedWorker}
}

// filterReason says why rank r may not take the request at now, "" when it is eligible.
func (p *memPool) filterReason(r *memRank, f *routeFilter, now int64) string {
	spec := &r.worker.spec
	switch {
	case !p.live(r.worker, now):
		return ReasonNotLive
	case f.allowed != nil && !f.allowed[spec.WorkerID]:
		return ReasonNotAllowed
	case f.pinned != "" && spec.WorkerID != f.pinned:
		return ReasonNotPinned
	case f.excluded != nil && f.excluded[spec.WorkerID]:
		return ReasonExcluded
	case r.worker.health.blocked(now, f.cfg.UnhealthyAfter):
		return ReasonUnhealthy
	case f.cfg.BusyPrefillFraction > 0 && spec.MaxNumBatchedTokens > 0 &&
		float64(r.load.PrefillTokens) > f.cfg.BusyPrefillFraction*float64(spec.MaxNumBatchedTokens):
		return ReasonBusyPrefill
	case f.cfg.BusyDecodeFraction > 0 && spec.TotalKVBlocks > 0 &&
		float64(r.load.DecodeBlocks) > f.cfg.BusyDecodeFraction*float64(spec.TotalKVBlocks):
		return ReasonBusyDecode
	}
	return ""
}

// evaluate runs filter → overlap → cost → pick (SPEC §6.3 steps 1–3) over every rank of the pool: the
// full scan, O(ranks). Explain and the decisions the fast path does not take (memory_select.go) use it.
// It changes nothing but the removal of a session binding whose worker is dead or removed, or that
// expired.
func (p *memPool) evaluate(req *RouteRequest, now int64) *evaluation {
	return p.evaluateOver(req, now, p.roster())
}

// evaluateOver is evaluate with ranks (in candidate order) as the candidates. Every rank left out must
// be one the filter rejects, so that the pick is the full scan's; only the reason counts differ.
func (p *memPool) evaluateOver(req *RouteRequest, now int64, ranks []*memRank) *evaluation {
	cfg := req.Overrides.Apply(p.cfg)
	e := &evaluation{cfg: cfg, required: RequiredBlocks(req.ISL, cfg.BlockSize), chosen: -1, reasons: map[string]int{}}
	f := newRouteFilter(req, &cfg)
	ov := p.overlaps(req.SeqHashes, now)
	minPrefill, anyEligible := int64(0), false
	e.cands = make([]evalCand, len(ranks))
	for i, r := range ranks {
		c := evalCand{rank: r, ov: ov[r.idx.slot], reason: p.filterReason(r, &f, now)}
		if c.reason != "" {
			e.reasons[c.reason]++
		} else if !anyEligible || r.load.PrefillTokens < minPrefill {
			minPrefill, anyEligible = r.load.PrefillTokens, true
		}
		e.cands[i] = c
	}
	costs := make([]float64, 0, len(e.cands))
	idx := make([]int, 0, len(e.cands))
	var ttftPool TTFTState
	if cfg.TTFT() {
		ttftPool = p.ttftPoolState(cfg.TTFTCalibration())
	}
	for i := range e.cands {
		c := &e.cands[i]
		if cfg.TTFT() { // credit stays 0: the cache enters as the tokens not to compute
			dev, _, _, _ := c.ov.Effective()
			c.coeffs = EffectiveTTFT(c.rank.ttft, ttftPool)
			c.cost = TTFTCandidate(c.coeffs, req.ISL, dev, cfg.BlockSize, c.rank.load).Cost()
		} else {
			c.cost, c.credit = Cost(CostInput{Cfg: cfg, ISL: req.ISL, RequiredBlocks: e.required, MinPrefill: minPrefill, Overlap: c.ov, Load: c.rank.load})
		}
		if c.reason == "" {
			costs = append(costs, c.cost)
			idx = append(idx, i)
		}
	}
	// Session affinity: a live binding to an eligible rank wins.
	if s := p.boundRank(req, &cfg, now); s != nil {
		for i := range e.cands {
			if e.cands[i].rank == s && e.cands[i].reason == "" {
				e.chosen, e.session = i, true
			}
		}
	}
	if e.chosen < 0 && len(costs) > 0 {
		e.chosen = idx[Pick(costs, cfg.Temperature, req.Random)]
	}
	return e
}

// boundRank returns the rank the request's live session binding names (nil: none), deleting a binding
// whose worker is dead or removed, or that expired.
func (p *memPool) boundRank(req *RouteRequest, cfg *PoolConfig, now int64) *memRank {
	if cfg.SessionAffinityTTLMs <= 0 || req.SessionID == "" {
		return nil
	}
	s := p.sessions[req.SessionID]
	switch {
	case s == nil:
		return nil
	case !p.attached(s.rank) || !p.live(s.rank.worker, now) ||
		(s.active == 0 && now >= s.idleAt+cfg.SessionAffinityTTLMs):
		delete(p.sessions, req.SessionID)
		return nil
	}
	return s.rank
}

func (e *evaluation) decision(req *RouteRequest) Decision {
	c := e.cands[e.chosen]
	_, _, _, depth := c.ov.Effective()
	return Decision{
		RequestID: req.RequestID, WorkerID: c.rank.worker.spec.WorkerID, DPRank: c.rank.rank, URL: c.rank.worker.spec.URL,
		OverlapBlocks: depth, RequiredBlocks: e.required, Cost: c.cost, SessionHit: e.session,
	}
}

func (p *memPool) prepare(req *RouteRequest) error {
	if err := validateRoute(req, p.cfg); err != nil {
		return err
	}
	p.releaseExpired(req.NowMs)
	p.releaseListed(req.Releases, req.NowMs)
	p.reclaim(req.NowMs)
	p.sweepSessions(req.NowMs)
	return nil
}

// Route implements Store.
func (m *Memory) Route(_ context.Context, req RouteRequest) (Decision, error) {
	p, err := m.pool(req.Pool)
	if err != nil {
		return Decision{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.prepare(&req); err != nil {
		return Decision{}, err
	}
	if p.leases[req.RequestID] != nil {
		return Decision{}, fmt.Errorf("%w: request %q already has an active lease", ErrConflict, req.RequestID)
	}
	e := p.chooseFast(&req, req.NowMs)
	if e == nil {
		e = p.evaluate(&req, req.NowMs)
	}
	if e.chosen < 0 {
		return Decision{}, &NoEligibleError{Pool: req.Pool, Reasons: e.reasons}
	}
	d := e.decision(&req)
	p.book(&req, e)
	return d, nil
}

// book records the decision: load and lease, session binding, approximate/predicted entries.
func (p *memPool) book(req *RouteRequest, e *evaluation) {
	now := req.NowMs
	c := e.cands[e.chosen]
	r := c.rank
	dev, _, _, _ := c.ov.Effective()
	l := &memLease{id: req.RequestID, rank: r, prefill: BookedPrefill(req.ISL, dev, e.cfg.BlockSize),
		decode: e.required, expiry: now + e.cfg.LeaseTTLMs}
	if e.cfg.TTFT() {
		l.ttft = &ttftFeatures{x1: r.load.PrefillTokens + l.prefill, x2: r.load.DecodeBlocks, at: now}
	}
	r.load.PrefillTokens += l.prefill
	r.load.DecodeBlocks += l.decode
	r.load.Requests++
	p.loadChanged(r)
	r.worker.health.takeProbe(now, e.cfg.UnhealthyAfter)
	if e.cfg.SessionAffinityTTLMs > 0 && req.SessionID != "" {
		s := p.sessions[req.SessionID]
		switch {
		case e.session:
		case len(p.sessions) >= MaxSessionsPerPool:
			s = nil // over the cap: route without a binding, counted
			p.sessOver++
		default:
			p.sessGen++
			s = &memSession{rank: r, gen: p.sessGen}
			p.sessions[req.SessionID] = s
		}
		if s != nil {
			s.active++
			l.session, l.sessionGen = req.SessionID, s.gen
		}
	}
	p.leases[l.id] = l
	heap.Push(&p.byExpiry, l)

	ttl := e.cfg.PredictedTTLMs
	if !p.kvEvents(r.worker) {
		ttl = e.cfg.ApproxTTLMs
	}
	if ttl > 0 {
		for _, seq := range req.SeqHashes {
			n := len(p.soft[seq])
			p.soft.put(seq, r.idx.slot, now+ttl)
			if len(p.soft[seq]) > n { // a new entry: one sweep record per entry
				p.softLog = append(p.softLog, softWrite{seq: seq, slot: r.idx.slot, expiry: now + ttl})
			}
		}
	}
}

// Explain implements Store.
func (m *Memory) Explain(_ context.Context, req RouteRequest) (Explanation, error) {
	p, err := m.pool(req.Pool)
	if err != nil {
		return Explanation{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	req.Releases = nil // a route's only (route.lua reads them in 'route' mode alone)
	if err := p.prepare(&req); err != nil {
		return Explanation{}, err
	}
	e := p.evaluate(&req, req.NowMs)
	out := Explanation{RequestID: req.RequestID, RequiredBlocks: e.required, Candidates: make([]Candidate, len(e.cands))}
	for i, c := range e.cands {
		_, _, _, depth := c.ov.Effective()
		dev, host, disk, _ := c.ov.Effective()
		out.Candidates[i] = Candidate{
			WorkerID: c.rank.worker.spec.WorkerID, DPRank: c.rank.rank, DeviceBlocks: dev, HostBlocks: host, DiskBlocks: disk,
			EventBlocks: c.ov.Event, PredictedBlocks: c.ov.Soft, OverlapBlocks: depth, Credit: c.credit,
			ActivePrefillTokens: c.rank.load.PrefillTokens, ActiveDecodeBlocks: c.rank.load.DecodeBlocks,
			ActiveRequests: c.rank.load.Requests, Cost: c.cost, Filtered: c.reason,
		}
		if e.cfg.TTFT() {
			k := c.coeffs
			out.Candidates[i].TTFTCoeffs = &k
		}
	}
	if e.chosen < 0 {
		err := &NoEligibleError{Pool: req.Pool, Reasons: e.reasons}
		out.Error = &ErrorBody{Code: ErrorCode(err), Message: err.Error()}
	} else {
		d := e.decision(&req)
		out.Decision = &d
	}
	ExplainCosts(&out, e.cfg, &req)
	return out, nil
}
