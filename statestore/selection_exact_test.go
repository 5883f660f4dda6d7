package statestore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/redis/rueidis"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestSelectionExactAgainstFullScan (issue 15): every decision a store makes equals the full scan over
// the state it shows. Before each Route, Explain (a full scan in both stores) lists every candidate with
// its cost and filter; the reference picks from those with Pick (or takes the session binding), and
// Route must return exactly that decision — worker, rank, cost bits, overlap, session hit — or the same
// "nothing eligible" error. Random states: workers with dp ranks, capacities and approximate mode,
// cached prefixes in three tiers (with inner removals: orphans), loads from bookings, prefill-done,
// releases and expiry, heartbeats, removals, health marks, allow-lists (short and long), pins,
// exclusions, sessions, busy fractions, credit decay, request weight, temperature, per-request
// overrides, knob changes on the pool, and costs built to tie. The memory store runs twice: with short
// allow-lists scanned worker by worker, and with every allow-list walked through the load order.
func TestSelectionExactAgainstFullScan(t *testing.T) {
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := 0
	steps := 80 // per state; rapid draws 100 states (-rapid.checks)
	if testing.Short() {
		steps = 30
	}
	stores := []struct {
		name     string
		universe int
		open     func() Store
	}{
		{"memory", universeMax, func() Store { return NewMemory() }},
		{"memory-walk", 0, func() Store { return NewMemory() }},
		{"redis", universeMax, func() Store {
			n++
			st, err := NewRedis(c, RedisOptions{Name: "redis://" + srv.Addr(), Prefix: fmt.Sprintf("sel%d:", n)})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			defer func(v int) { universeMax = v }(universeMax)
			universeMax = st.universe
			decisions := 0
			rapid.Check(t, func(t *rapid.T) { decisions += checkSelectionExact(t, st.open(), steps) })
			t.Logf("%d decisions checked", decisions)
		})
	}
}

// selState is what the test remembers of a store between steps.
type selState struct {
	ids     []string            // registered (or once registered) worker ids
	dp      map[string]int      // worker → dp size
	evID    map[string]uint64   // worker/rank → last event id
	leases  []string            // request ids that may still be active
	chains  [][]uint64          // local-hash chains (prompt material)
	stored  map[string][]uint64 // worker/rank → sequence hashes stored (removal material)
	removed map[string]bool     // removed workers
	reqs    int                 // requests drawn
}

func checkSelectionExact(t *rapid.T, s Store, steps int) int {
	ctx := context.Background()
	bs := rapid.SampledFrom([]int{1, 4, 16}).Draw(t, "block_size")
	cfg := DefaultPoolConfig(bs)
	knobs := func(c *PoolConfig) {
		c.PrefillLoadScale = rapid.SampledFrom([]float64{1, 1, 0.1, 0.3, 4, 0, 1e-3}).Draw(t, "scale")
		c.DecodeActiveRequestWeight = rapid.SampledFrom([]float64{0, 0, 0.3, 1, 64}).Draw(t, "rw")
		c.OverlapScoreCredit = rapid.SampledFrom([]float64{1, 0, 2, 0.7}).Draw(t, "credit")
		c.OverlapScoreCreditDecay = rapid.SampledFrom([]float64{0, 0, 0.5, 3}).Draw(t, "decay")
		c.BusyPrefillFraction = rapid.SampledFrom([]float64{0, 0, 0.5, 1.2}).Draw(t, "busy_prefill")
		c.BusyDecodeFraction = rapid.SampledFrom([]float64{0, 0, 0.6}).Draw(t, "busy_decode")
		c.Temperature = rapid.SampledFrom([]float64{0, 0, 0, 0.5}).Draw(t, "temperature")
		// cost_model ttft: the fast path must leave it to the full scan (per-rank coefficients)
		c.CostModel = rapid.SampledFrom([]string{CostModelDynamo, CostModelDynamo, CostModelDynamo, CostModelTTFT}).Draw(t, "cost_model")
	}
	knobs(&cfg)
	cfg.SessionAffinityTTLMs = rapid.SampledFrom([]int64{0, 500}).Draw(t, "session_ttl")
	cfg.LeaseTTLMs = rapid.SampledFrom([]int64{300, 1000, 300000}).Draw(t, "lease_ttl")
	cfg.WorkerTTLMs = rapid.SampledFrom([]int64{0, 0, 800}).Draw(t, "worker_ttl")
	cfg.UnhealthyAfter = rapid.SampledFrom([]int64{0, 2}).Draw(t, "unhealthy_after")
	cfg.UnhealthyBackoffMs = 400
	cfg.PredictedTTLMs = rapid.SampledFrom([]int64{0, 300}).Draw(t, "predicted_ttl")
	cfg.ApproxTTLMs = 200
	if err := s.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	st := &selState{dp: map[string]int{}, evID: map[string]uint64{}, stored: map[string][]uint64{}, removed: map[string]bool{},
		chains: [][]uint64{{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 9, 10}, {11, 12, 13}}}
	var now int64
	register := func(id string) {
		spec := WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: rapid.IntRange(1, 3).Draw(t, "dp"),
			MaxNumBatchedTokens: rapid.SampledFrom([]int64{0, 64, 256}).Draw(t, "mnbt"),
			TotalKVBlocks:       rapid.SampledFrom([]int64{0, 40}).Draw(t, "kv_blocks")}
		if rapid.IntRange(0, 5).Draw(t, "approx") == 0 {
			spec.KVEvents = new(false)
		}
		if err := s.PutWorker(ctx, "p", spec, now); err != nil {
			t.Fatal(err)
		}
		st.dp[id], st.removed[id] = spec.DPSize, false
	}
	for i, nw := 0, rapid.IntRange(1, 10).Draw(t, "workers"); i < nw; i++ {
		id := fmt.Sprintf("w%d", rapid.IntRange(0, 15).Draw(t, "id"))
		if _, ok := st.dp[id]; !ok {
			st.ids = append(st.ids, id)
		}
		register(id)
	}
	worker := func() string { return rapid.SampledFrom(st.ids).Draw(t, "worker") }
	decisions := 0
	for step := 0; step < steps; step++ {
		switch op := rapid.IntRange(0, 20).Draw(t, "op"); {
		case op < 9:
			if routeMatchesFullScan(t, s, st, &cfg, now) {
				decisions++
			}
		case op < 11: // end or half-end a request
			if len(st.leases) == 0 {
				continue
			}
			i := rapid.IntRange(0, len(st.leases)-1).Draw(t, "lease")
			var err error
			switch rapid.IntRange(0, 2).Draw(t, "end") {
			case 0:
				_, err = s.PrefillDone(ctx, "p", st.leases[i], now)
			case 1:
				_, err = s.RenewLease(ctx, "p", st.leases[i], now)
			default:
				_, err = s.Done(ctx, "p", st.leases[i], now)
				st.leases = append(st.leases[:i], st.leases[i+1:]...)
			}
			if err != nil {
				t.Fatal(err)
			}
		case op < 14: // cache a prefix (or evict inner blocks) on a rank
			selEvent(t, s, st, worker(), now)
		case op < 15:
			now += rapid.SampledFrom([]int64{1, 50, 100, 200, 300, 400, 800}).Draw(t, "advance")
			workersMatchExplain(t, s, now)
		case op < 17: // forward outcomes
			w, ok := worker(), rapid.IntRange(0, 3).Draw(t, "ok") == 0
			for i := rapid.IntRange(1, 3).Draw(t, "reports"); i > 0; i-- {
				if _, err := s.ReportForward(ctx, "p", w, ok, now); err != nil && !errors.Is(err, ErrUnknownWorker) {
					t.Fatal(err)
				}
			}
		case op < 18: // heartbeat (maybe new capacities), or a new worker
			if rapid.IntRange(0, 3).Draw(t, "new") == 0 {
				id := fmt.Sprintf("w%d", rapid.IntRange(0, 15).Draw(t, "id"))
				if _, ok := st.dp[id]; !ok {
					st.ids = append(st.ids, id)
				}
				register(id)
			} else {
				register(worker())
			}
		case op < 19:
			w := worker()
			if err := s.RemoveWorker(ctx, "p", w, now); err != nil && !errors.Is(err, ErrUnknownWorker) {
				t.Fatal(err)
			}
			st.removed[w] = true
		case op < 20: // the pool's scoring knobs change (the load order is recomputed)
			knobs(&cfg)
			if err := s.PutPool(ctx, "p", cfg); err != nil {
				t.Fatal(err)
			}
		default: // many requests at once: loads pile up
			for i := rapid.IntRange(1, 6).Draw(t, "burst"); i > 0; i-- {
				if routeMatchesFullScan(t, s, st, &cfg, now) {
					decisions++
				}
			}
		}
	}
	return decisions
}

// selEvent stores a chain prefix on one rank of w in some tier, or removes a few of its blocks.
func selEvent(t *rapid.T, s Store, st *selState, w string, now int64) {
	rank := rapid.IntRange(0, 2).Draw(t, "rank")
	key := fmt.Sprintf("%s/%d", w, rank)
	salt := uint64(len(w)*31+rank+1) << 44
	st.evID[key]++
	ev := Event{DPRank: rank, HasEventID: true, EventID: st.evID[key], Tier: Tier(rapid.SampledFrom([]int{0, 0, 1, 2}).Draw(t, "tier"))}
	if rapid.IntRange(0, 3).Draw(t, "remove") == 0 && len(st.stored[key]) > 0 {
		ev.Kind = EventRemoved
		for _, h := range st.stored[key] {
			if rapid.IntRange(0, 3).Draw(t, "rm") == 0 {
				ev.Removed = append(ev.Removed, h^salt)
			}
		}
	} else {
		ev.Kind = EventStored
		c := rapid.SampledFrom(st.chains).Draw(t, "chain")
		local := append([]uint64(nil), c[:rapid.IntRange(1, len(c)).Draw(t, "cut")]...)
		if rapid.IntRange(0, 2).Draw(t, "extend") == 0 {
			local = append(local, uint64(rapid.IntRange(20, 30).Draw(t, "h")))
			st.chains = append(st.chains, local)
		}
		seq := blockhash.Sequence(nil, local)
		for i := range local {
			ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i] ^ salt, LocalHash: local[i]})
		}
		st.stored[key] = append(st.stored[key], seq...)
	}
	if _, err := s.ApplyEvents(context.Background(), EventBatch{Pool: "p", WorkerID: w, Events: []Event{ev}, NowMs: now}); err != nil {
		t.Fatal(err)
	}
}

// routeMatchesFullScan draws one request, computes the full scan's pick from Explain and checks Route
// against it. It reports whether a decision was made.
func routeMatchesFullScan(t *rapid.T, s Store, st *selState, cfg *PoolConfig, now int64) bool {
	ctx := context.Background()
	st.reqs++
	c := rapid.SampledFrom(st.chains).Draw(t, "prompt")
	local := append([]uint64(nil), c[:rapid.IntRange(0, len(c)).Draw(t, "len")]...)
	if len(local) > 0 && rapid.IntRange(0, 4).Draw(t, "diverge") == 0 {
		local[rapid.IntRange(0, len(local)-1).Draw(t, "at")] = 99
	}
	seq := blockhash.Sequence(nil, local)
	req := RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", st.reqs), SeqHashes: seq,
		ISL:    int64(len(seq)*cfg.BlockSize + rapid.IntRange(0, cfg.BlockSize-1).Draw(t, "tail")),
		Random: rapid.SampledFrom([]float64{0, 0.25, 0.5, 0.75, 0.999, 0.3333}).Draw(t, "random"), NowMs: now}
	if rapid.IntRange(0, 2).Draw(t, "session") == 0 {
		req.SessionID = fmt.Sprintf("s%d", rapid.IntRange(0, 3).Draw(t, "sid"))
	}
	pick := func(label string) []string {
		var out []string
		for _, id := range st.ids {
			if rapid.IntRange(0, 2).Draw(t, label) == 0 {
				out = append(out, id)
			}
		}
		if rapid.IntRange(0, 5).Draw(t, label+"_ghost") == 0 {
			out = append(out, "ghost")
		}
		return out
	}
	switch rapid.IntRange(0, 9).Draw(t, "filter") {
	case 0, 1:
		req.AllowedWorkers = pick("allow")
	case 2:
		req.PinnedWorker = rapid.SampledFrom(append([]string{"ghost"}, st.ids...)).Draw(t, "pin")
	case 3:
		req.ExcludedWorkers = pick("exclude")
	}
	if rapid.IntRange(0, 3).Draw(t, "override") == 0 {
		f := func(vs ...float64) *float64 {
			if rapid.Bool().Draw(t, "set") {
				return new(rapid.SampledFrom(vs).Draw(t, "v"))
			}
			return nil
		}
		req.Overrides = Overrides{OverlapScoreCredit: f(0, 1, 3), PrefillLoadScale: f(cfg.PrefillLoadScale, 2, 0.3),
			OverlapScoreCreditDecay: f(0, 1), DecodeActiveRequestWeight: f(cfg.DecodeActiveRequestWeight, 0.7),
			Temperature: f(0, 0.8), BusyPrefillFraction: f(0, 0.25), HostCacheHitWeight: f(0, 0.9)}
	}
	ex, err := s.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	eff := req.Overrides.Apply(*cfg)
	var costs []float64
	var elig []Candidate
	for _, c := range ex.Candidates {
		if c.Filtered == "" {
			costs = append(costs, c.Cost)
			elig = append(elig, c)
		}
	}
	d, err := s.Route(ctx, req)
	if ex.Decision == nil {
		var ne *NoEligibleError
		if !errors.As(err, &ne) || len(elig) > 0 {
			t.Fatalf("nothing eligible in the full scan (%d eligible): route gave %+v, %v", len(elig), d, err)
		}
		return false
	}
	if err != nil {
		t.Fatalf("route %+v: %v (full scan: %+v)", req, err, *ex.Decision)
	}
	if !ex.Decision.SessionHit {
		i := Pick(costs, eff.Temperature, req.Random)
		if w := elig[i]; w.WorkerID != ex.Decision.WorkerID || w.DPRank != ex.Decision.DPRank || w.Cost != ex.Decision.Cost {
			t.Fatalf("explain's decision %+v is not the pick %d of its eligible candidates %+v", *ex.Decision, i, elig)
		}
	}
	if d != *ex.Decision {
		t.Fatalf("route decided %+v, the full scan %+v (request %+v, candidates %+v)", d, *ex.Decision, req, ex.Candidates)
	}
	st.leases = append(st.leases, d.RequestID)
	return true
}

// TestFastPathRoundingTies puts ranks on loads whose load scores are equal in exact arithmetic but, with
// knobs like 0.1 or 0.3, differ by an ulp or two once rounded, so the order of the load scores and the
// order (and ties) of the rounded costs disagree; for many prompt lengths and random numbers the fast
// path must still pick exactly what the full scan picks.
func TestFastPathRoundingTies(t *testing.T) {
	ctx := context.Background()
	mismatch := 0
	for _, k := range []struct {
		scale, rw float64
		bs        int
	}{{0.1, 0.3, 4}, {0.7, 0.3, 1}, {0.3, 0.1, 3}, {0.7, 0.7, 16}, {0.1, 0.1, 1}} {
		m := NewMemory()
		cfg := DefaultPoolConfig(k.bs)
		cfg.PrefillLoadScale, cfg.DecodeActiveRequestWeight = k.scale, k.rw
		if err := m.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		p, _ := m.pool("p")
		dScale, dRW := int64(k.scale*10+0.5), int64(k.rw*10+0.5) // decode blocks worth 10·bs tokens, 10 requests
		n := 0
		for i := int64(0); i < 6; i++ {
			for j := int64(0); j < 6; j++ {
				for _, extra := range []int64{0, 0, 1} { // a few a token off the exact tie
					id := fmt.Sprintf("w%03d", n)
					n++
					if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: id}, 0); err != nil {
						t.Fatal(err)
					}
					r := p.workers[id].ranks[0]
					r.load = Load{PrefillTokens: 1000 + i*10*int64(k.bs) + extra, DecodeBlocks: 200 - i*dScale - j*dRW, Requests: 7 + j*10}
					p.loadChanged(r)
				}
			}
		}
		for isl := int64(0); isl < 3000; isl += 7 {
			for _, rnd := range []float64{0, 0.1, 0.37, 0.5, 0.81, 0.999} {
				req := RouteRequest{Pool: "p", RequestID: "x", ISL: isl, Random: rnd}
				fast, full := p.chooseFast(&req, 0), p.evaluate(&req, 0)
				a, b := fast.decision(&req), full.decision(&req)
				if a != b {
					mismatch++
					if mismatch < 5 {
						t.Errorf("scale %v rw %v bs %d isl %d r %v: fast path %+v, full scan %+v", k.scale, k.rw, k.bs, isl, rnd, a, b)
					}
				}
			}
		}
	}
	if mismatch > 0 {
		t.Fatalf("%d decisions differ", mismatch)
	}
}

// workersMatchExplain checks the worker listing against a full-scan explanation at the same instant:
// the same ranks in candidate order, with the same loads.
func workersMatchExplain(t *rapid.T, s Store, now int64) {
	ctx := context.Background()
	ws, err := s.Workers(ctx, "p", now)
	if err != nil {
		t.Fatal(err)
	}
	ex, err := s.Explain(ctx, RouteRequest{Pool: "p", RequestID: "list", NowMs: now})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, w := range ws {
		if len(w.Ranks) != w.DPSize {
			t.Fatalf("worker %s lists %d ranks, dp_size %d", w.WorkerID, len(w.Ranks), w.DPSize)
		}
		for _, r := range w.Ranks {
			got = append(got, fmt.Sprintf("%s/%d p%d d%d n%d", w.WorkerID, r.DPRank, r.ActivePrefillTokens, r.ActiveDecodeBlocks, r.ActiveRequests))
		}
	}
	for _, c := range ex.Candidates {
		want = append(want, fmt.Sprintf("%s/%d p%d d%d n%d", c.WorkerID, c.DPRank, c.ActivePrefillTokens, c.ActiveDecodeBlocks, c.ActiveRequests))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("t=%d workers:\n %v\nexplain:\n %v", now, got, want)
	}
}

// TestFastPathLargePool compares the fast path with the full scan directly on pools of a few hundred
// ranks whose loads come from a small set (many load groups tied at the minimum, across groups too),
// with prompt holders in several tiers, exclusions, health-marked workers, sessions, busy fractions and
// credit decay, for thousands of requests.
func TestFastPathLargePool(t *testing.T) {
	ctx := context.Background()
	r := rand.New(rand.NewPCG(15, 1))
	decisions := 0
	for pool := 0; pool < 12; pool++ {
		m := NewMemory()
		cfg := DefaultPoolConfig(4)
		cfg.PrefillLoadScale = []float64{1, 0.5, 0.3, 0}[pool%4] // 0 with a busy fraction: busy groups tie with idle ones
		cfg.DecodeActiveRequestWeight = []float64{0, 1, 0.3, 0}[pool%4]
		cfg.OverlapScoreCreditDecay = []float64{0, 0, 2}[pool%3]
		if pool%4 == 3 {
			cfg.BusyPrefillFraction = 0.5
		}
		cfg.SessionAffinityTTLMs = 1000
		if pool%2 == 1 {
			cfg.WorkerTTLMs = 600 // registered at 0–999 ms, events up to 1,500 ms, requests at 0–1,999 ms
		}
		if err := m.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		p, _ := m.pool("p")
		n := 100 + r.IntN(300)
		var ids []string
		for w := 0; w < n; w++ {
			id := fmt.Sprintf("w%03d", r.IntN(1000))
			spec := WorkerSpec{WorkerID: id, DPSize: 1 + r.IntN(2), MaxNumBatchedTokens: []int64{0, 16, 64}[r.IntN(3)]}
			if err := m.PutWorker(ctx, "p", spec, int64(r.IntN(1000))); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// Holders: a few workers cache prefixes of one chain, in various tiers.
		local := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
		seq := blockhash.Sequence(nil, local)
		for i := 0; i < 8; i++ {
			ev := Event{Kind: EventStored, Tier: Tier(r.IntN(3))}
			for j := 0; j < 1+r.IntN(len(local)); j++ {
				ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[j] + uint64(i)<<40, LocalHash: local[j]})
			}
			if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: ids[r.IntN(len(ids))], Events: []Event{ev}, NowMs: int64(r.IntN(1500))}); err != nil {
				t.Fatal(err)
			}
		}
		loads := []Load{{}, {}, {}, {0, 8, 1}, {32, 0, 1}, {32, 8, 2}, {16, 4, 1}, {64, 0, 2}}
		for _, rk := range p.roster() {
			rk.load = loads[r.IntN(len(loads))]
			p.loadChanged(rk)
		}
		for _, id := range ids {
			if r.IntN(20) == 0 {
				w := p.workers[id]
				w.health = healthRec{fails: 3, until: 500, backoff: 500}
				p.healthChanged(w)
			}
		}
		for q := 0; q < 400; q++ {
			if q%50 == 0 { // heartbeats and events move lastSeen on (events without telling bySeen)
				for i := 0; i < 20; i++ {
					id := ids[r.IntN(len(ids))]
					if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: id, NowMs: int64(r.IntN(2000))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			req := RouteRequest{Pool: "p", RequestID: "x", SeqHashes: seq[:r.IntN(len(seq)+1)], Random: r.Float64(), NowMs: int64(r.IntN(2000))}
			req.ISL = int64(len(req.SeqHashes)*4 + r.IntN(4))
			if r.IntN(3) == 0 {
				for i := r.IntN(20); i > 0; i-- {
					req.ExcludedWorkers = append(req.ExcludedWorkers, ids[r.IntN(len(ids))])
				}
			}
			if r.IntN(4) == 0 {
				req.SessionID = fmt.Sprintf("s%d", r.IntN(5))
				p.sessions[req.SessionID] = &memSession{rank: p.roster()[r.IntN(len(p.roster()))], active: 1}
			}
			fast := p.chooseFast(&req, req.NowMs)
			full := p.evaluate(&req, req.NowMs)
			if fast == nil {
				if full.chosen >= 0 {
					t.Fatalf("pool %d request %d: the fast path found nothing, the full scan %+v", pool, q, full.decision(&req))
				}
				continue
			}
			if a, b := fast.decision(&req), full.decision(&req); a != b {
				t.Fatalf("pool %d request %d: fast path %+v, full scan %+v", pool, q, a, b)
			}
			decisions++
		}
	}
	t.Logf("%d decisions compared", decisions)
}
