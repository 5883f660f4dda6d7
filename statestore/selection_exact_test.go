package statestore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
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
	// Its pools are small: the full-scan bound would decide them all by the full scan, which is what the
	// reference is. Bound 0, so route.lua's load-order walk is what is checked (TestRedisFullScanBound
	// checks the default bound).
	t.Cleanup(SetFullScanMaxRanks(0))
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	n := 0
	var opened []*Redis // the Redis stores, for their fast-path counts
	steps := 80         // per state; rapid draws 100 states (-rapid.checks)
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
			opened = append(opened, st)
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
			if st.name == "redis" {
				// Many states draw knobs the fast path declines (temperature, credit decay, worker_ttl_ms,
				// scoring overrides): checkSelectionExact checks that every decision that qualifies took it.
				var fast int64
				for _, r := range opened {
					fast += r.fastRoutes.Load()
				}
				t.Logf("%d of them through route.lua's fast path", fast)
			}
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
	fast    int64               // decisions that qualify for route.lua's fast path (fastQualifies)
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
		if r, ok := s.(*Redis); ok {
			checkLoadOrder(t, r, "p")
		}
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
	if r, ok := s.(*Redis); ok && r.fastRoutes.Load() != st.fast {
		t.Fatalf("%d decisions took route.lua's fast path, %d qualified for it", r.fastRoutes.Load(), st.fast)
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
	if fastQualifies(cfg, &eff, &d) {
		st.fast++
	}
	st.leases = append(st.leases, d.RequestID)
	return true
}

// fastQualifies reports whether route.lua decides d through choose_fast rather than the full scan: a
// decision without a session hit, at temperature 0, under cost_model dynamo, scored with the pool's own prefill_load_scale and
// decode_active_request_weight in safeKnob's range. The Redis store counts the decisions it made that way, which must be exactly these.
func fastQualifies(pool, eff *PoolConfig, d *Decision) bool {
	return !d.SessionHit && eff.Temperature <= 0 && pool.CostModel != CostModelTTFT && eff.PrefillLoadScale == pool.PrefillLoadScale &&
		eff.DecodeActiveRequestWeight == pool.DecodeActiveRequestWeight && safeKnob(eff.PrefillLoadScale) &&
		safeKnob(eff.DecodeActiveRequestWeight)
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

// TestRedisFastSelectLargePool drives route.lua's fast path (choose_fast) on pools of 400–600 ranks whose
// loads come from a handful of values, so the minimum is a big load group or several tied groups, with
// tied holders (overlap_score_credit 0: a holder costs what its load costs), excluded and health-marked
// workers inside the tied groups (skipped by lz rank), busy fractions (groups tested member by member),
// long allow-lists (the same), pins and sessions. Before every decision Explain (the full scan, in one
// call) gives the reference; Route must decide exactly the same, and most decisions must take the fast
// path. The paged explain (pages of 8 or 64 ranks, its decision through choose_fast) must equal it.
func TestRedisFastSelectLargePool(t *testing.T) {
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(15, 3))
	cases := []struct {
		name          string
		scale, rw     float64
		busy, credit  float64
		unhealthy     int64
		longAllowList bool
		decay         float64
		ttl           int64
	}{
		{"tied-groups", 1, 0, 0, 0, 2, false, 0, 0},       // loads (0,0,n) all tie: several counted groups
		{"one-group-holders", 1, 1, 0, 0, 2, false, 0, 0}, // the idle group and tied holders: a merge
		{"scale0-busy", 0, 0, 0.5, 0, 0, false, 0, 0},     // equal decode blocks tie; busy-testable groups listed
		{"allow-list", 1, 0, 0, 1, 2, true, 0, 0},         // a long allow-list: every group listed
		{"decay-ttl", 1, 0.3, 0, 1, 2, false, 2, 2},       // decayed credit (min prefill from lp), dead workers (sz)
	}
	total, fastTotal := 0, int64(0)
	for ci, tc := range cases {
		st, err := NewRedis(c, RedisOptions{Name: "redis://" + srv.Addr(), Prefix: fmt.Sprintf("big%d:", ci)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultPoolConfig(4)
		cfg.PrefillLoadScale, cfg.DecodeActiveRequestWeight = tc.scale, tc.rw
		cfg.BusyPrefillFraction, cfg.OverlapScoreCredit = tc.busy, tc.credit
		if tc.credit == 0 { // every tier: a holder costs exactly what its load costs
			cfg.HostCacheHitWeight, cfg.DiskCacheHitWeight = 0, 0
		}
		cfg.UnhealthyAfter, cfg.UnhealthyBackoffMs = tc.unhealthy, 3600000
		cfg.SessionAffinityTTLMs = 1000
		cfg.LeaseTTLMs = 3600000
		cfg.OverlapScoreCreditDecay, cfg.WorkerTTLMs = tc.decay, tc.ttl // ttl 2: registered at 0 → dead at 2
		if err := st.PutPool(ctx, "p", cfg); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for len(ids) < 200+r.IntN(100) {
			id := fmt.Sprintf("w%04d", r.IntN(10000))
			if slices.Contains(ids, id) {
				continue
			}
			spec := WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: 2, MaxNumBatchedTokens: []int64{0, 16, 64}[r.IntN(3)]}
			if err := st.PutWorker(ctx, "p", spec, int64(len(ids)%2)); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		// Holders of a chain, in all tiers.
		local := []uint64{1, 2, 3, 4, 5, 6}
		seq := blockhash.Sequence(nil, local)
		for i := 0; i < 12; i++ {
			ev := Event{Kind: EventStored, Tier: Tier(r.IntN(3)), DPRank: r.IntN(2)}
			for j := 0; j < 1+r.IntN(len(local)); j++ {
				ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[j] + uint64(i)<<40, LocalHash: local[j]})
			}
			if _, err := st.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: ids[r.IntN(len(ids))], Events: []Event{ev}, NowMs: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// Loads from a few values: pinned bookings of 0, 4 or 32 tokens, some prefill-done.
		for i := 0; i < len(ids); i++ {
			for n := r.IntN(3); n > 0; n-- {
				isl := []int64{0, 0, 4, 32}[r.IntN(4)]
				id := fmt.Sprintf("load%d-%d", i, n)
				if _, err := st.Route(ctx, RouteRequest{Pool: "p", RequestID: id, ISL: isl, PinnedWorker: ids[i], NowMs: 1}); err != nil {
					t.Fatal(err)
				}
				if r.IntN(2) == 0 {
					if _, err := st.PrefillDone(ctx, "p", id, 1); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		for i := 0; i < len(ids)/15; i++ { // health-marked workers (in their back-off for the whole test)
			for j := 0; j < 3; j++ {
				if _, err := st.ReportForward(ctx, "p", ids[r.IntN(len(ids))], false, 1); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := st.fastRoutes.Load()
		decisions := 0
		for q := 0; q < 150; q++ {
			req := RouteRequest{Pool: "p", RequestID: fmt.Sprintf("q%d", q), SeqHashes: seq[:r.IntN(len(seq)+1)], Random: r.Float64(), NowMs: 2}
			req.ISL = int64(len(req.SeqHashes)*4 + r.IntN(4))
			switch r.IntN(6) {
			case 0, 1:
				for i := r.IntN(30); i > 0; i-- {
					req.ExcludedWorkers = append(req.ExcludedWorkers, ids[r.IntN(len(ids))])
				}
			case 2:
				req.SessionID = fmt.Sprintf("s%d", r.IntN(4))
			case 3:
				req.PinnedWorker = ids[r.IntN(len(ids))]
			}
			if tc.longAllowList {
				for _, id := range ids {
					if r.IntN(3) > 0 {
						req.AllowedWorkers = append(req.AllowedWorkers, id)
					}
				}
			}
			// The paged explain (head through choose_fast, pages of 8 or 64 ranks) first, then the one-call
			// full scan: they must agree but for the paging fields.
			st.explainPage = []int{8, 64}[q%2]
			pex, perr := st.Explain(ctx, req)
			st.explainPage = 1 << 30
			ex, err := st.Explain(ctx, req)
			if err != nil || perr != nil {
				t.Fatal(err, perr)
			}
			if pex.Pages < 2 || pex.Snapshot == nil || *pex.Snapshot || ex.Pages != 0 || ex.Snapshot != nil {
				t.Fatalf("%s request %d: paged explain of %d pages (snapshot %v), one-call %d", tc.name, q, pex.Pages, pex.Snapshot, ex.Pages)
			}
			pex.Pages, pex.Snapshot = 0, nil
			if !reflect.DeepEqual(pex, ex) {
				t.Fatalf("%s request %d: paged explain differs from the full scan:\n paged %+v\n full  %+v", tc.name, q, pex, ex)
			}
			d, err := st.Route(ctx, req)
			if ex.Decision == nil {
				if err == nil {
					t.Fatalf("%s request %d: the full scan found nothing, route %+v", tc.name, q, d)
				}
				continue
			}
			if err != nil || d != *ex.Decision {
				t.Fatalf("%s request %d: route %+v (%v), the full scan %+v", tc.name, q, d, err, *ex.Decision)
			}
			decisions++
			if req.SessionID == "" || r.IntN(2) == 0 { // keep the loads near their few values
				if _, err := st.Done(ctx, "p", req.RequestID, 2); err != nil {
					t.Fatal(err)
				}
			}
		}
		fast := st.fastRoutes.Load() - before
		if heads := st.fastHeads.Load(); heads*3 < int64(decisions)*2 {
			t.Errorf("%s: only %d of %d paged explains decided through the fast path", tc.name, heads, decisions)
		}
		st.fastHeads.Store(0)
		t.Logf("%s: %d ranks, %d decisions, %d through the fast path", tc.name, 2*len(ids), decisions, fast)
		if fast*3 < int64(decisions)*2 { // session hits and pins aside
			t.Errorf("%s: only %d of %d decisions took the fast path", tc.name, fast, decisions)
		}
		total, fastTotal = total+decisions, fastTotal+fast
	}
	t.Logf("%d decisions compared, %d fast", total, fastTotal)
}

// fataler is what checkLoadOrder needs of a test: *rapid.T and *testing.T both are.
type fataler interface {
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// checkLoadOrder checks the Redis load order against the loads: lz has one member per roster candidate,
// whose first 24 bytes are that candidate's lv bytes (as a multiset), scored by the load key; there is no
// lc (layout 5); lp holds the prefill tokens of lv; and the last-seen order sz matches seen.
// t is a *rapid.T or a *testing.T.
func checkLoadOrder(t fataler, r *Redis, pool string) {
	ctx := context.Background()
	keys := PoolKeys(r.prefix, pool)
	// The loads of every candidate: every loads chunk lv:<cid> (a multiset: chunk order does not matter;
	// the roster tests check that no chunk key is left over).
	var lv []byte
	for cursor := uint64(0); ; {
		e, err := r.c.Do(ctx, r.c.B().Scan().Cursor(cursor).Match(keys[4]+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range e.Elements {
			b, err := r.c.Do(ctx, r.c.B().Get().Key(k).Build()).AsBytes()
			if err != nil {
				t.Fatal(err)
			}
			lv = append(lv, b...)
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	zs, err := r.c.Do(ctx, r.c.B().Zrange().Key(keys[21]).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatal(err)
	}
	// lc (layouts 3-4: each load's member count) is never written since layout 5.
	if n, err := r.c.Do(ctx, r.c.B().Exists().Key(keys[22]).Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("lc exists (%d, %v): layout 5 counts groups with ZCOUNT", n, err)
	}
	cfg, err := r.GetPool(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{}
	for i := 0; i+24 <= len(lv); i += 24 {
		want[string(lv[i:i+24])]++
	}
	got := map[string]int{}
	for _, z := range zs {
		l := z.Member[:24]
		got[l]++
		b := []byte(l)
		load := Load{PrefillTokens: int64(math.Float64frombits(binary.BigEndian.Uint64(b))),
			DecodeBlocks: int64(math.Float64frombits(binary.BigEndian.Uint64(b[8:]))),
			Requests:     int64(math.Float64frombits(binary.BigEndian.Uint64(b[16:])))}
		if k := loadKey(&cfg, load); k != z.Score {
			t.Fatalf("lz member of load %+v scored %v, load key %v", load, z.Score, k)
		}
	}
	if len(zs) != len(lv)/24 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("lz loads %v, lv loads %v", got, want)
	}
	seen, err := r.c.Do(ctx, r.c.B().Hgetall().Key(keys[3]).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	sz, err := r.c.Do(ctx, r.c.B().Zrange().Key(keys[23]).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range sz {
		if seen[z.Member] != fmt.Sprint(int64(z.Score)) {
			t.Fatalf("sz scores %s at %v, seen holds %q", z.Member, z.Score, seen[z.Member])
		}
	}
	if len(sz) != len(seen) {
		t.Fatalf("sz has %d workers, seen %d", len(sz), len(seen))
	}
	lp, err := r.c.Do(ctx, r.c.B().Zrange().Key(keys[24]).Min("0").Max("-1").Withscores().Build()).AsZScores()
	if err != nil {
		t.Fatal(err)
	}
	var pl, pz []float64
	for i := 0; i+24 <= len(lv); i += 24 {
		pl = append(pl, math.Float64frombits(binary.BigEndian.Uint64(lv[i:])))
	}
	for _, z := range lp {
		pz = append(pz, z.Score)
	}
	slices.Sort(pl)
	if fmt.Sprint(pl) != fmt.Sprint(pz) {
		t.Fatalf("lp scores %v, lv prefill tokens %v", pz, pl)
	}
}
