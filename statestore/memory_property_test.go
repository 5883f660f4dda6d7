package statestore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/rueidis"
	"pgregory.net/rapid"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// The naive reference of SPEC §4.1 and §5, independent of both stores: per (worker, dp_rank) a map of
// held sequence hashes to tiers, the fence (epoch, last event id) and the approximate/predicted entries
// with their expiry; every query walks the prompt from its first block. Engine hashes are seq ^ salt of
// the rank, one per (rank, block), so an engine hash is known exactly while its block is held.

type refRank struct {
	salt   uint64
	epoch  string
	hasID  bool
	lastID uint64
	tiers  map[uint64]uint8 // sequence hash → tiers held (bit 1<<tier)
	soft   map[uint64]int64 // sequence hash → expiry, ms (counts while now < expiry)
}

func (r *refRank) clear() { r.tiers, r.soft = map[uint64]uint8{}, map[uint64]int64{} }

type refWorker struct {
	kvEvents bool
	ranks    []*refRank
}

// refOverlap is one rank's match of a prompt at now (§5 Tiers; §6 time rules for the deeper soft blocks).
type refOverlap struct{ event, soft, device, host, disk, depth int }

func (r *refRank) overlap(seq []uint64, now int64) refOverlap {
	var o refOverlap
	for _, s := range seq {
		t := r.tiers[s]
		if t == 0 {
			break
		}
		o.event++
		switch bestTier(t) {
		case TierDevice:
			o.device++
		case TierHost:
			o.host++
		default:
			o.disk++
		}
	}
	for _, s := range seq {
		if e, ok := r.soft[s]; !ok || e <= now {
			break
		}
		o.soft++
	}
	o.depth = max(o.event, o.soft)
	o.device += o.depth - o.event
	return o
}

// refModel is the reference of one pool.
type refModel struct {
	workers  map[string]*refWorker
	approxMs int64 // approx_ttl_ms
	predMs   int64 // predicted_ttl_ms (0 = off)
}

// apply mirrors one event of worker w (§4.1): unknown worker or rank, fence, then the kind.
func (m *refModel) apply(w string, ev Event) {
	rw := m.workers[w]
	if rw == nil || ev.DPRank >= len(rw.ranks) {
		return
	}
	r := rw.ranks[ev.DPRank]
	if ev.Epoch != "" && ev.Epoch != r.epoch {
		if r.epoch != "" { // a new engine process: the rank starts empty
			r.clear()
			r.hasID, r.lastID = false, 0
		}
		r.epoch = ev.Epoch
	}
	if ev.HasEventID {
		if r.hasID && ev.EventID <= r.lastID {
			return // stale
		}
		r.hasID, r.lastID = true, ev.EventID // a gap is applied too
	}
	switch ev.Kind {
	case EventStored:
		var parent uint64
		if ev.HasParent {
			parent = ev.Parent ^ r.salt
			if r.tiers[parent] == 0 {
				return // unknown parent: dropped, never attached at the root
			}
		}
		hasParent := ev.HasParent
		for _, b := range ev.Blocks {
			seq := b.LocalHash
			if hasParent {
				seq = blockhash.Next(parent, b.LocalHash)
			}
			r.tiers[seq] |= 1 << ev.Tier
			parent, hasParent = seq, true
		}
	case EventRemoved:
		for _, h := range ev.Removed {
			seq := h ^ r.salt
			if t := r.tiers[seq] &^ (1 << ev.Tier); t != 0 {
				r.tiers[seq] = t
			} else {
				delete(r.tiers, seq)
			}
		}
	case EventCleared:
		for _, rr := range rw.ranks {
			rr.clear()
		}
	}
}

// pick is the rank of worker w a route pinned to w takes with no load and random 0: minimum cost
// max(D − credit, 0) + D (isl = D blocks, default weights), the first rank among ties.
func (m *refModel) pick(w string, seq []uint64, now int64) int {
	best, bestCost := 0, 0.0
	for i, r := range m.workers[w].ranks {
		o := r.overlap(seq, now)
		d := float64(len(seq))
		c := max(d-(float64(o.device)+0.75*float64(o.host)+0.25*float64(o.disk)), 0) + d
		if i == 0 || c < bestCost {
			best, bestCost = i, c
		}
	}
	return best
}

// routed books the soft entries of a decision on (w, rank) at now (§5 approximate mode, predict-on-route).
func (m *refModel) routed(w string, rank int, seq []uint64, now int64) {
	ttl := m.predMs
	if !m.workers[w].kvEvents {
		ttl = m.approxMs
	}
	if ttl <= 0 {
		return
	}
	for _, s := range seq {
		m.workers[w].ranks[rank].soft[s] = now + ttl
	}
}

// refWorkerSpecs are the property test's workers: dp ranks, and one in approximate mode.
var refWorkerSpecs = []WorkerSpec{{WorkerID: "a"}, {WorkerID: "b", DPSize: 2}, {WorkerID: "c", KVEvents: new(false)}}

// TestStoresMatchNaiveReference drives random events (stores under known and unknown parents, removals
// of inner blocks and of other tiers, clears, duplicate and gapped event ids, new epochs, events of
// unknown workers and ranks), pinned routes that write approximate/predicted entries, worker removals and
// a virtual clock that lands on expiry instants, on each store, and checks every query and every
// explained candidate (event/soft depth, device/host/disk split) against the naive reference.
func TestStoresMatchNaiveReference(t *testing.T) {
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var n int
	stores := []struct {
		name string
		open func() Store
	}{
		{"memory", func() Store { return NewMemory() }},
		{"redis", func() Store {
			n++
			st, err := NewRedis(c, RedisOptions{Name: "redis://" + srv.Addr(), Prefix: fmt.Sprintf("ref%d:", n)})
			if err != nil {
				t.Fatal(err)
			}
			return st
		}},
	}
	maxSteps := 150
	if testing.Short() {
		maxSteps = 40
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) { checkAgainstReference(t, st.open(), maxSteps) })
		})
	}
}

func checkAgainstReference(t *rapid.T, s Store, maxSteps int) {
	ctx := context.Background()
	cfg := DefaultPoolConfig(4)
	cfg.ApproxTTLMs = 200
	cfg.PredictedTTLMs = rapid.SampledFrom([]int64{0, 300}).Draw(t, "predicted_ttl")
	if err := s.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	m := &refModel{workers: map[string]*refWorker{}, approxMs: cfg.ApproxTTLMs, predMs: cfg.PredictedTTLMs}
	register := func(spec WorkerSpec, now int64) {
		if err := s.PutWorker(ctx, "p", spec, now); err != nil {
			t.Fatal(err)
		}
		rw := &refWorker{kvEvents: spec.KVEvents == nil || *spec.KVEvents}
		for i := 0; i < max(spec.DPSize, 1); i++ {
			rw.ranks = append(rw.ranks, &refRank{salt: uint64(len(spec.WorkerID)*131+i*7+1) << 40})
			rw.ranks[i].clear()
		}
		m.workers[spec.WorkerID] = rw
	}
	for _, spec := range refWorkerSpecs {
		register(spec, 0)
	}
	var now int64
	ids := map[string]uint64{}   // worker/rank → last id issued
	epochs := map[string]int{}   // worker/rank → engine generation
	chains := [][]uint64{{1, 2}} // local-hash chains from the root (query and parent material)
	prompt := func() []uint64 {
		q := append([]uint64(nil), rapid.SampledFrom(chains).Draw(t, "q")...)
		q = q[:rapid.IntRange(0, len(q)).Draw(t, "qlen")]
		if len(q) > 0 && rapid.IntRange(0, 4).Draw(t, "mutate") == 0 {
			q[rapid.IntRange(0, len(q)-1).Draw(t, "at")] = 99
		}
		return q
	}
	steps := rapid.IntRange(1, maxSteps).Draw(t, "steps")
	for step := 0; step < steps; step++ {
		w := rapid.SampledFrom([]string{"a", "b", "b", "c", "ghost"}).Draw(t, "worker")
		switch op := rapid.IntRange(0, 13).Draw(t, "op"); {
		case op < 7: // one event
			rank := 0
			if w == "b" || rapid.IntRange(0, 9).Draw(t, "badrank") == 0 {
				rank = rapid.IntRange(0, 2).Draw(t, "rank") // rank 2 of b (dp 2) is unknown
			}
			key := fmt.Sprintf("%s/%d", w, rank)
			ev := Event{DPRank: rank, Tier: Tier(rapid.SampledFrom([]int{0, 0, 1, 2}).Draw(t, "tier"))}
			switch rapid.IntRange(0, 9).Draw(t, "fence") {
			case 0: // a duplicate: the same id again
			case 1: // a gap
				ids[key] += 2
			case 2: // the engine restarted: a new epoch, ids from 1
				epochs[key]++
				ids[key] = 1
			default:
				ids[key]++
			}
			if rapid.IntRange(0, 9).Draw(t, "noid") != 0 {
				ev.HasEventID, ev.EventID = true, ids[key]
			}
			if epochs[key] > 0 || rapid.Bool().Draw(t, "epoch") {
				ev.Epoch = fmt.Sprintf("e%d", epochs[key])
			}
			salt := uint64(0)
			if rw := m.workers[w]; rw != nil && rank < len(rw.ranks) {
				salt = rw.ranks[rank].salt
			}
			switch k := rapid.IntRange(0, 9).Draw(t, "kind"); {
			case k < 6:
				ev.Kind = EventStored
				c := rapid.SampledFrom(chains).Draw(t, "chain")
				cut := rapid.IntRange(0, len(c)).Draw(t, "cut")
				local := append([]uint64(nil), c[:cut]...)
				seq := blockhash.Sequence(nil, local)
				if cut > 0 {
					ev.HasParent, ev.Parent = true, seq[cut-1]^salt
				}
				for i := rapid.IntRange(1, 40).Draw(t, "n"); i > 0; i-- {
					local = append(local, uint64(rapid.IntRange(1, 3).Draw(t, "h")))
				}
				seq = blockhash.Sequence(seq[:0], local)
				for i := cut; i < len(local); i++ {
					ev.Blocks = append(ev.Blocks, StoredBlock{EngineHash: seq[i] ^ salt, LocalHash: local[i]})
				}
				chains = append(chains, local)
			case k < 9:
				ev.Kind = EventRemoved
				c := blockhash.Sequence(nil, rapid.SampledFrom(chains).Draw(t, "rmchain"))
				for i := range c {
					if rapid.IntRange(0, 3).Draw(t, "pick") == 0 {
						ev.Removed = append(ev.Removed, c[i]^salt)
					}
				}
			default:
				ev.Kind = EventCleared
			}
			if _, err := s.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: w, Events: []Event{ev}, NowMs: now}); err != nil {
				t.Fatal(err)
			}
			m.apply(w, ev)
		case op < 9: // a route pinned to w, ended at once (loads stay 0): books its soft entries
			if m.workers[w] == nil {
				continue
			}
			q := prompt()
			seq := blockhash.Sequence(nil, q)
			d, err := s.Route(ctx, RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", step), SeqHashes: seq,
				ISL: int64(len(q) * 4), PinnedWorker: w, NowMs: now})
			if err != nil {
				t.Fatal(err)
			}
			rank := m.pick(w, seq, now)
			if want := m.workers[w].ranks[rank].overlap(seq, now).depth; d.WorkerID != w || d.DPRank != rank || d.OverlapBlocks != want {
				t.Fatalf("step %d t=%d: route %v pinned to %s: got %s/%d overlap %d, want %s/%d overlap %d",
					step, now, q, w, d.WorkerID, d.DPRank, d.OverlapBlocks, w, rank, want)
			}
			m.routed(w, rank, seq, now)
			if _, err := s.Done(ctx, "p", d.RequestID, now); err != nil {
				t.Fatal(err)
			}
		case op < 10: // remove a worker and register it again: it starts empty (fence too)
			if m.workers[w] == nil {
				continue
			}
			if err := s.RemoveWorker(ctx, "p", w, now); err != nil {
				t.Fatal(err)
			}
			for _, spec := range refWorkerSpecs {
				if spec.WorkerID == w {
					register(spec, now)
				}
			}
			for r := 0; r < 3; r++ {
				delete(ids, fmt.Sprintf("%s/%d", w, r))
				delete(epochs, fmt.Sprintf("%s/%d", w, r))
			}
		case op < 11: // the clock, onto and around the expiry instants (200, 300 ms)
			now += rapid.SampledFrom([]int64{1, 99, 100, 199, 200, 299, 300}).Draw(t, "advance")
		case op < 12: // every candidate of an explanation
			q := prompt()
			seq := blockhash.Sequence(nil, q)
			ex, err := s.Explain(ctx, RouteRequest{Pool: "p", RequestID: "x", SeqHashes: seq, ISL: int64(len(q) * 4), NowMs: now})
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, c := range ex.Candidates {
				got = append(got, fmt.Sprintf("%s/%d ev%d soft%d dev%d host%d disk%d depth%d", c.WorkerID, c.DPRank,
					c.EventBlocks, c.PredictedBlocks, c.DeviceBlocks, c.HostBlocks, c.DiskBlocks, c.OverlapBlocks))
			}
			for _, spec := range refWorkerSpecs {
				for i, r := range m.workers[spec.WorkerID].ranks {
					o := r.overlap(seq, now)
					want = append(want, fmt.Sprintf("%s/%d ev%d soft%d dev%d host%d disk%d depth%d", spec.WorkerID, i,
						o.event, o.soft, o.device, o.host, o.disk, o.depth))
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d t=%d: explain %v:\n got  %v\n want %v", step, now, q, got, want)
			}
		default: // an overlap query
			q := prompt()
			seq := blockhash.Sequence(nil, q)
			got, err := s.Overlap(ctx, "p", seq, now)
			if err != nil {
				t.Fatal(err)
			}
			var want []Score
			for _, spec := range refWorkerSpecs {
				for i, r := range m.workers[spec.WorkerID].ranks {
					if d := r.overlap(seq, now).depth; d > 0 {
						want = append(want, Score{WorkerID: spec.WorkerID, DPRank: i, Blocks: d})
					}
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d t=%d: query %v: got %v, want %v", step, now, q, got, want)
			}
		}
	}
}

// DrainEvents are three Stored events — two chains sharing blocks 1..3 (1..40 and 1,2,3,41..60) on the
// device, 1..20 on the host too — then one Removed event per block and tier, inner blocks first (orphans
// and placeholders on the way), that evict all 80 block-tiers (TestMemoryIndexDrains, TestRedisIndexDrains).
func DrainEvents() []Event {
	var chain, branch []StoredBlock
	for i := uint64(1); i <= 60; i++ {
		b := StoredBlock{EngineHash: 1000 + i, LocalHash: i}
		if i <= 40 {
			chain = append(chain, b)
		} else {
			branch = append(branch, b)
		}
	}
	evs := []Event{{Kind: EventStored, Blocks: chain}, {Kind: EventStored, HasParent: true, Parent: 1003, Blocks: branch},
		{Kind: EventStored, Tier: TierHost, Blocks: chain[:20]}}
	order := []uint64{20, 3, 10, 45, 1, 30}
	for i := uint64(60); i >= 1; i-- {
		if !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	for _, tier := range []Tier{TierDevice, TierHost} {
		for _, i := range order {
			evs = append(evs, Event{Kind: EventRemoved, Tier: tier, Removed: []uint64{1000 + i}})
		}
	}
	return evs
}

// newOneWorkerMemory returns a memory store with pool "p" (block size 4) and worker "w".
func newOneWorkerMemory(t *testing.T) *Memory {
	t.Helper()
	ctx := context.Background()
	m := NewMemory()
	if err := m.PutPool(ctx, "p", DefaultPoolConfig(4)); err != nil {
		t.Fatal(err)
	}
	if err := m.PutWorker(ctx, "p", WorkerSpec{WorkerID: "w"}, 0); err != nil {
		t.Fatal(err)
	}
	return m
}

// TestMemoryIndexDrains: evicting every block leaves no entry, placeholder or engine link in the memory
// index (the Redis twin is TestRedisIndexDrains).
func TestMemoryIndexDrains(t *testing.T) {
	ctx := context.Background()
	m := newOneWorkerMemory(t)
	removed := 0
	for i, ev := range DrainEvents() {
		ev.HasEventID, ev.EventID = true, uint64(i+1)
		res, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: "w", Events: []Event{ev}})
		if err != nil {
			t.Fatal(err)
		}
		removed += res.RemovedBlocks
	}
	if removed != 80 {
		t.Fatalf("removed %d block tiers, want 80", removed)
	}
	p, _ := m.pool("p")
	r := p.workers["w"].ranks[0].idx
	if p.events.m.Len() != 0 || len(p.events.over) != 0 || r.byEngine.Len() != 0 || r.held != 0 || r.orphans != 0 || r.nonDevice != 0 {
		t.Fatalf("after evicting everything: %d entries, %d overflow lists, %d engine links, held %d, orphans %d, non-device %d",
			p.events.m.Len(), len(p.events.over), r.byEngine.Len(), r.held, r.orphans, r.nonDevice)
	}
}

// TestClearedIndexIsReclaimed checks that a cleared rank's entries — held blocks and placeholders left
// by inner removals — are all reclaimed from the pool index by later calls.
func TestClearedIndexIsReclaimed(t *testing.T) {
	ctx := context.Background()
	m := newOneWorkerMemory(t)
	apply := func(evs ...Event) {
		t.Helper()
		if _, err := m.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: "w", Events: evs}); err != nil {
			t.Fatal(err)
		}
	}
	var blocks []StoredBlock
	for i := uint64(1); i <= 3*reclaimBudget; i++ {
		blocks = append(blocks, StoredBlock{EngineHash: 1000 + i, LocalHash: i})
	}
	apply(Event{Kind: EventStored, Blocks: blocks}, Event{Kind: EventStored, Tier: TierHost, Blocks: blocks[:10]})
	apply(Event{Kind: EventRemoved, Removed: []uint64{1005, 1100, 1200}}) // inner removals: placeholders
	p, _ := m.pool("p")
	if p.events.m.Len() != len(blocks) {
		t.Fatalf("index holds %d entries, want %d", p.events.m.Len(), len(blocks))
	}
	apply(Event{Kind: EventCleared})
	for i := 0; i < 64 && (p.events.m.Len() > 0 || len(p.dead) > 0); i++ {
		apply() // each call reclaims a bounded amount
	}
	if p.events.m.Len() != 0 || len(p.events.over) != 0 || len(p.dead) != 0 {
		t.Fatalf("after clear: %d entries, %d overflow lists, %d dead indexes left", p.events.m.Len(), len(p.events.over), len(p.dead))
	}
}
