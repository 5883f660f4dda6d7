package statestore

import (
	"math"
	"slices"
	"sort"
)

// Sublinear exact selection in the memory store (issue 15). With temperature 0 the full scan
// (evaluate) picks the minimum cost among the eligible ranks, the k tied minima split by floor(r·k) in
// candidate order. chooseFast finds the same minimum and the same tie set without visiting every rank:
//
//   - a rank holding part of the prompt (a "holder": found through the index, O(holders)) is costed
//     exactly with Cost;
//   - a rank holding none has credit 0, so its cost depends only on its load: the pool keeps the ranks in
//     load groups (one per exact load, memory_loadorder.go) ordered by load score (byKey); the walk reads
//     that order from the head only as far as a group could still cost no more than the minimum found so
//     far, costing each group once for all its members;
//   - a tied group's eligible members are counted, when the filter's rejections can be listed (no
//     allow-list; holders, excluded, health-marked and dead workers; no busy fraction, or a group of load
//     0, which is never busy), from the group's size, and the floor(r·k)-th tied candidate is found by
//     order statistics over the groups' treaps (pickTied), never member by member;
//   - the credit decay's reference, min active_prefill_tokens over the eligible ranks, is read exactly
//     from the head of byPrefill (an integer order) when a holder's device credit needs it;
//   - a live session binding to an eligible rank wins as in the full scan.
//
// Proof that the walk reads every rank of the minimum (u = 2^-53, the unit roundoff). Let σ =
// prefill_load_scale, ρ = decode_active_request_weight, b = block_size, I = isl, Q = required_blocks, and
// for a non-holder w with loads (P, D, R): S_w = σ·P/b + D + ρ·R and C = σ·I/b + Q in exact arithmetic;
// its true cost is T_w = S_w + C (every credit term multiplies a zero block count, so credit is exactly
// 0 and max(raw − 0, 0) = raw). Every term is ≥ 0; integers are < 2^53 (exact as float64); σ and ρ are 0 or
// in [1e-200, 1e9] (safeKnob), so no product or sum underflows to a subnormal or overflows. Each term of
// Cost's result passes through at most 4 roundings (division, product, two sums; a fused multiply-add
// only removes roundings), each a factor in [1−u, 1+u], so the computed cost_w ≥ (1−u)^4·T_w. The stored
// key K_w = loadKey is within the same factors of S_w: S_w ≥ K_w/(1+u)^4. The walk's bound with
// s = 1 − 2^-40, lb(K) = ((K·s + cLo)·s) with cLo = (σ·(I/b) + Q)·s, all rounded, satisfies
// lb(K_w) ≤ s²(1+u)^10·(S_w + C) ≤ (1−u)^4·T_w ≤ cost_w, because s² ≤ 1 − 2^-39 while
// (1+u)^10/(1−u)^4 < 1 + 2^-48. Rounding is monotone, so lb is non-decreasing in K. The walk visits the
// groups by ascending K (all members of a group share K and, having the same load, the same computed
// cost) and stops at the first group with lb(K) > m, m the least exact cost seen so far (holders
// included): every unvisited rank w' has cost_w' ≥ lb(K_w') ≥ lb(K) > m, so it is neither below nor tied
// with the minimum. m only decreases as the walk goes on, so the stop stays valid, and the minimum and
// its whole tie set are among the groups and holders costed exactly — the same costs, bit for bit, the
// full scan computes (Cost with the same inputs), hence the same k and the same pick.
//
// Cost: O(holders + skipped ranks + groups read·log + G²·log² n for G tied groups), independent of the
// pool's size: an idle pool of 4,096 ranks is one group (dead workers under worker_ttl_ms cost
// O(dead) per decision, found from the head of bySeen). Groups not counted (a long allow-list; a busy
// fraction and a non-zero load) have the filter tested on every member the walk reads: still exact, but
// linear in the members tied at the minimum or rejected ahead of it. The full scan still runs for:
//   - temperature > 0: the softmax needs every eligible cost (O(ranks) per decision, exact);
//   - a request overriding prefill_load_scale or decode_active_request_weight (the order is by the pool's
//     values), or knobs outside safeKnob's range;
//   - no eligible rank (the error names every filter reason, which needs every rank).
//
// A pinned worker or an allow-list of at most universeMax workers scans just those workers' ranks (the
// others are all filtered), with the full scan's own code.

// universeMax is the largest allow-list scanned worker by worker; a longer one walks the load order
// with the allow-list as a filter. A variable so that tests exercise both.
var universeMax = 64

// slack is s = 1 − 2^-40 of the proof above.
const slack = 1 - 0x1p-40

// safeKnob reports whether a cost knob keeps the proof's terms away from subnormals.
func safeKnob(v float64) bool { return v == 0 || (v >= 1e-200 && v <= MaxKnob) }

// chooseFast returns the decision evaluate would reach with one candidate (the chosen one), or nil when
// the full scan must run (see above).
func (p *memPool) chooseFast(req *RouteRequest, now int64) *evaluation {
	cfg := req.Overrides.Apply(p.cfg)
	// cost_model ttft: per-rank coefficients break the proof's "a non-holder's cost depends on its load
	// only" (two ranks with one load may cost differently): the full scan decides.
	if cfg.TTFT() || cfg.Temperature > 0 || cfg.PrefillLoadScale != p.cfg.PrefillLoadScale ||
		cfg.DecodeActiveRequestWeight != p.cfg.DecodeActiveRequestWeight ||
		!safeKnob(cfg.PrefillLoadScale) || !safeKnob(cfg.DecodeActiveRequestWeight) {
		return nil
	}
	if ranks, ok := p.universe(req); ok {
		if e := p.evaluateOver(req, now, ranks); e.chosen >= 0 {
			return e
		}
		return nil
	}
	f := newRouteFilter(req, &cfg)
	e := &evaluation{cfg: cfg, required: RequiredBlocks(req.ISL, cfg.BlockSize), chosen: -1}
	ov := p.overlaps(req.SeqHashes, now)
	in := CostInput{Cfg: cfg, ISL: req.ISL, RequiredBlocks: e.required}
	needMin := func(o Overlap) bool {
		dev, _, _, _ := o.Effective()
		return dev > 0 && cfg.OverlapScoreCreditDecay > 0 && e.required > 0
	}
	minKnown := false
	costOf := func(c *evalCand) {
		if !minKnown && needMin(c.ov) {
			in.MinPrefill, minKnown = p.minEligiblePrefill(&f, now), true
		}
		in.Overlap, in.Load = c.ov, c.rank.load
		c.cost, c.credit = Cost(in)
	}
	if r := p.boundRank(req, &cfg, now); r != nil && p.filterReason(r, &f, now) == "" {
		c := evalCand{rank: r, ov: ov[r.idx.slot]}
		costOf(&c)
		e.cands, e.chosen, e.session = []evalCand{c}, 0, true
		return e
	}
	holders := make([]evalCand, 0, len(ov))
	for s, o := range ov {
		if r := p.slots[s]; p.filterReason(r, &f, now) == "" {
			holders = append(holders, evalCand{rank: r, ov: o})
		}
	}
	// listable: without an allow-list, the filter rejects only ranks we can list (holders are costed
	// on their own; excluded, health-marked and dead workers) or busy ones, and a group whose load is 0
	// where a busy fraction is set has none of those: such a group's eligible members are counted, not
	// visited (counted groups).
	listable := f.allowed == nil
	counted := func(l Load) bool {
		return listable && (cfg.BusyPrefillFraction == 0 || l.PrefillTokens == 0) &&
			(cfg.BusyDecodeFraction == 0 || l.DecodeBlocks == 0)
	}
	var skip []*memRank // listable: the ranks a group count leaves out (few: a slice, not a map)
	if listable {
		add := func(r *memRank) {
			if !slices.Contains(skip, r) {
				skip = append(skip, r)
			}
		}
		for s := range ov {
			add(p.slots[s])
		}
		for id := range f.excluded {
			if w := p.workers[id]; w != nil {
				for _, r := range w.ranks {
					add(r)
				}
			}
		}
		for w := range p.marked {
			if w.health.blocked(now, cfg.UnhealthyAfter) {
				for _, r := range w.ranks {
					add(r)
				}
			}
		}
		if p.cfg.WorkerTTLMs > 0 {
			p.deadWorkers(now, func(w *memWorker) {
				for _, r := range w.ranks {
					add(r)
				}
			})
		}
	}
	// The minimum so far (m, found), the holders at it and the groups at it with their eligible counts.
	type tiedGroup struct {
		g       *loadGroup
		k       int32
		counted bool
		ranks   []*memRank // !counted: the eligible members
	}
	m, found := 0.0, false
	var tied []evalCand
	var groups []tiedGroup
	for i := range holders {
		c := &holders[i]
		costOf(c)
		switch {
		case !found || c.cost < m:
			m, found = c.cost, true
			tied = append(tied[:0], *c)
		case c.cost == m:
			tied = append(tied, *c)
		}
	}
	bs := float64(cfg.BlockSize)
	cLo := (cfg.PrefillLoadScale*(float64(req.ISL)/bs) + float64(e.required)) * slack
	p.walkBuf = p.byKey.orderedWalk(p.walkBuf, func(g *loadGroup) bool {
		if found && (g.key*slack+cLo)*slack > m {
			return false
		}
		in.Overlap, in.Load = Overlap{}, g.load
		cost, _ := Cost(in)
		if found && cost > m {
			return true
		}
		tg := tiedGroup{g: g, counted: counted(g.load)}
		if tg.counted {
			tg.k = treapSize(g.root)
			for _, r := range skip {
				if r.group == g {
					tg.k--
				}
			}
		} else {
			treapEach(g.root, func(r *memRank) {
				if _, held := ov[r.idx.slot]; !held && p.filterReason(r, &f, now) == "" {
					tg.ranks = append(tg.ranks, r)
				}
			})
			tg.k = int32(len(tg.ranks))
		}
		switch {
		case tg.k == 0:
		case !found || cost < m:
			m, found = cost, true
			tied, groups = tied[:0], append(groups[:0], tg)
		default: // cost == m
			groups = append(groups, tg)
		}
		return true
	})
	if !found {
		return nil
	}
	// Pick's temperature-0 rule: index floor(r·k) among the k tied, in candidate order.
	k := len(tied)
	for _, tg := range groups {
		k += int(tg.k)
	}
	want := min(int(math.Floor(req.Random*float64(k))), k-1)
	allCounted := true
	for _, tg := range groups {
		allCounted = allCounted && tg.counted
	}
	var chosen evalCand
	if allCounted {
		sort.Slice(tied, func(i, j int) bool { return rankLess(tied[i].rank, tied[j].rank) })
		gs := make([]*loadGroup, len(groups))
		for i := range groups {
			gs[i] = groups[i].g
		}
		chosen = pickTied(int32(want), tied, gs, skip)
		chosen.cost = m
	} else {
		for _, tg := range groups {
			if tg.counted {
				treapEach(tg.g.root, func(r *memRank) {
					if !slices.Contains(skip, r) {
						tied = append(tied, evalCand{rank: r, cost: m})
					}
				})
			}
			for _, r := range tg.ranks {
				tied = append(tied, evalCand{rank: r, cost: m})
			}
		}
		sort.Slice(tied, func(i, j int) bool { return rankLess(tied[i].rank, tied[j].rank) })
		chosen = tied[want]
	}
	e.cands, e.chosen = []evalCand{chosen}, 0
	return e
}

// tiedGroupView is one tied group's eligible members: all but the skipped ones, whose positions in
// the group are at (sorted).
type tiedGroupView struct {
	g  *loadGroup
	at []int32
}

// member returns the i-th eligible member.
func (v *tiedGroupView) member(i int32) *memRank {
	for _, a := range v.at {
		if a <= i {
			i++
		}
	}
	return treapAt(v.g.root, i)
}

// before counts the eligible members before x in candidate order.
func (v *tiedGroupView) before(x *memRank) int32 {
	n := treapLess(v.g.root, x)
	skipped, _ := slices.BinarySearch(v.at, n)
	return n - int32(skipped)
}

// pickTied returns the j-th (from 0) of the tied candidates in candidate order: the tied holders
// (sorted) and the eligible members of the tied groups (every member not in skip). Each source is
// binary-searched for the member with exactly j candidates before it, counted across all sources with
// the treaps' subtree sizes: O(G²·log² n + s·log n) for G groups and s skipped ranks, never a pass over
// the members.
func pickTied(j int32, holders []evalCand, groups []*loadGroup, skip []*memRank) evalCand {
	views := make([]tiedGroupView, len(groups))
	for i, g := range groups {
		views[i].g = g
	}
	for _, r := range skip {
		for i := range views {
			if r.group == views[i].g {
				views[i].at = append(views[i].at, treapLess(r.group.root, r))
			}
		}
	}
	for i := range views {
		slices.Sort(views[i].at)
	}
	before := func(x *memRank) int32 {
		n, _ := sort.Find(len(holders), func(i int) int {
			if rankLess(x, holders[i].rank) || x == holders[i].rank {
				return -1
			}
			return 1
		})
		b := int32(n)
		for i := range views {
			b += views[i].before(x)
		}
		return b
	}
	find := func(n int32, at func(i int32) *memRank) *memRank {
		lo, hi := int32(0), n-1
		for lo <= hi {
			mid := lo + (hi-lo)/2
			x := at(mid)
			switch b := before(x); {
			case b == j:
				return x
			case b < j:
				lo = mid + 1
			default:
				hi = mid - 1
			}
		}
		return nil
	}
	if x := find(int32(len(holders)), func(i int32) *memRank { return holders[i].rank }); x != nil {
		for _, h := range holders {
			if h.rank == x {
				return h
			}
		}
	}
	for i := range views {
		v := &views[i]
		if x := find(treapSize(v.g.root)-int32(len(v.at)), v.member); x != nil {
			return evalCand{rank: x}
		}
	}
	panic("statestore: pickTied: no candidate at the drawn index") // unreachable: j < the number of candidates
}

// minEligiblePrefill is the least active_prefill_tokens over the ranks f lets through at now (0 when
// none does), read from the head of byPrefill.
func (p *memPool) minEligiblePrefill(f *routeFilter, now int64) int64 {
	var min int64
	p.prefBuf = p.byPrefill.orderedWalk(p.prefBuf, func(r *memRank) bool {
		if p.filterReason(r, f, now) != "" {
			return true
		}
		min = r.load.PrefillTokens
		return false
	})
	return min
}

// universe returns the ranks of the pinned worker, or of an allow-list of at most universeMax workers,
// in candidate order (ok false: the request names no such set).
func (p *memPool) universe(req *RouteRequest) ([]*memRank, bool) {
	var ids []string
	switch {
	case req.PinnedWorker != "":
		ids = []string{req.PinnedWorker}
	case len(req.AllowedWorkers) > 0 && len(req.AllowedWorkers) <= universeMax:
		ids = req.AllowedWorkers
	default:
		return nil, false
	}
	var ranks []*memRank
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if w := p.workers[id]; w != nil && !seen[id] {
			seen[id] = true
			ranks = append(ranks, w.ranks...)
		}
	}
	sort.Slice(ranks, func(i, j int) bool { return rankLess(ranks[i], ranks[j]) })
	return ranks, true
}
