package statestore

import (
	"cmp"
	"container/heap"
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// reclaimBudget bounds the dead index entries and expired soft entries reclaimed per call, so that
// clearing a worker with millions of blocks never stalls a decision.
const reclaimBudget = 4096

// Memory is the embedded Store: all state in this process, one lock per pool. It is the default for a
// single router, and the reference the Redis store is tested against.
type Memory struct {
	mu     sync.RWMutex
	pools  map[string]*memPool
	limits Limits
}

// NewMemory returns an empty embedded store with the default Limits.
func NewMemory() *Memory { return NewMemoryLimits(Limits{}) }

// NewMemoryLimits returns an empty embedded store with the given limits (validate them first).
func NewMemoryLimits(l Limits) *Memory {
	return &Memory{pools: map[string]*memPool{}, limits: l}
}

var _ Store = (*Memory)(nil)

// Name implements Store.
func (m *Memory) Name() string { return "memory" }

// Ping implements Store; the embedded store is always reachable.
func (m *Memory) Ping(context.Context) error { return nil }

// Close implements Store.
func (m *Memory) Close() error { return nil }

// memRank is one (worker, dp_rank) registration incarnation: loads and ordering state survive index
// clears; a removed worker's ranks are detached, so late lease releases touch nothing live.
type memRank struct {
	worker      *memWorker
	rank        int
	idx         *rankIndex
	load        Load
	lastEventID uint64
	hasEvent    bool
	epoch       string
	degraded    bool
	ttft        TTFTState // calibration (ttft_route.go); zero: not calibrated yet
	// The load order (memory_loadorder.go): the group of ranks with this load (nil: detached), this
	// rank's node in the group's treap, and its position in byPrefill.
	group  *loadGroup
	tl, tr *memRank
	tprio  uint32
	tsize  int32
	ppos   int32
}

type memWorker struct {
	spec     WorkerSpec
	lastSeen int64
	ranks    []*memRank
	health   healthRec // shared forwarding health (health.go); kept by re-registration
	// seenKey is lastSeen as bySeen last sorted it: ≤ lastSeen (events move lastSeen forward without
	// telling the heap; deadWorkers catches up).
	seenKey int64
	seenPos int32
}

type memLease struct {
	id         string
	rank       *memRank
	prefill    int64
	decode     int64
	expiry     int64
	session    string
	sessionGen uint64
	heapIdx    int
	ttft       *ttftFeatures // a ttft decision's features until prefill_done calibrates on them
}

type memSession struct {
	rank   *memRank
	gen    uint64
	active int64
	idleAt int64 // when the last active request ended, ms
}

// idleSession is a sweep record: session id went idle at idleAt (ms). A record whose session was
// reactivated or re-bound since is skipped when it comes up.
type idleSession struct {
	id     string
	idleAt int64
}

// softWrite is the sweep record of one soft entry (exactly one per entry): the FIFO is roughly ordered by
// expiry; a record whose entry was slid forward is requeued with the new expiry when it is reached.
type softWrite struct {
	seq    uint64
	slot   slotID
	expiry int64
}

type memPool struct {
	mu        sync.RWMutex
	limits    Limits // the store's
	name      string
	cfg       PoolConfig
	workers   map[string]*memWorker
	ranks     []*memRank              // candidates, ordered by (worker id bytes, dp rank): read through roster()
	rosterAdd []*memRank              // ranks registered since ranks was last merged (roster)
	rosterOld bool                    // ranks may hold detached ranks
	groups    map[Load]*loadGroup     // registered ranks by exact load (memory_loadorder.go)
	byKey     orderHeap[*loadGroup]   // the groups by load score
	byPrefill orderHeap[*memRank]     // registered ranks by active prefill tokens
	prio      uint64                  // treap priority generator state
	marked    map[*memWorker]struct{} // workers with a health mark (until ≠ 0): the only ones routing may skip as unhealthy
	bySeen    orderHeap[*memWorker]   // workers by seenKey: the dead ones (worker_ttl_ms) are a prefix
	walkBuf   []int32                 // scratch: the byKey walk's frontier
	prefBuf   []int32                 // scratch: the byPrefill walk's frontier
	seenBuf   []int32                 // scratch: the bySeen walk's frontier
	slots     []*memRank              // slot → current owner (nil: dead slot)
	events    *eventIndex
	soft      softIndex
	softLog   []softWrite
	leases    map[string]*memLease
	byExpiry  leaseHeap
	ttftPool  *TTFTState // the pool's TTFT fit (nil: Init of the reference)
	sessions  map[string]*memSession
	idleLog   []idleSession // idle bindings in idle order (the store clock only moves forward)
	sessOver  int64         // bindings not made because the pool held MaxSessionsPerPool
	dead      []*rankIndex  // cleared indexes awaiting reclamation
	sessGen   uint64
	seqBuf    []uint64 // scratch: sequence hashes of the event being applied
	engineBuf []uint64 // scratch: engine hashes of the Stored event being applied
	slotBuf   []int    // scratch: engine-map slots of a Removed chunk's blocks (−1: not found)
	declared  int64    // KV blocks declared by the ranks registered so far (total_kv_blocks; presize)
	sink      uint64   // keeps the prefetching reads of u64Map.touch (not amd64) from being optimised away
}

func (m *Memory) pool(name string) (*memPool, error) {
	m.mu.RLock()
	p := m.pools[name]
	m.mu.RUnlock()
	if p == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownPool, name)
	}
	return p, nil
}

// PutPool implements Store.
func (m *Memory) PutPool(_ context.Context, name string, cfg PoolConfig) error {
	if err := CheckID("pool", name); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	cfg = canonical(cfg)
	cfg.Models = append([]string(nil), cfg.Models...) // the caller keeps its slice
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pools[name]
	if p == nil {
		if len(m.pools) >= m.limits.maxPools() {
			return m.limits.tooManyPools(name)
		}
		m.pools[name] = &memPool{
			limits: m.limits, name: name, cfg: cfg, workers: map[string]*memWorker{}, slots: []*memRank{nil},
			events: &eventIndex{}, soft: softIndex{}, leases: map[string]*memLease{}, sessions: map[string]*memSession{},
			marked: map[*memWorker]struct{}{},
		}
		newLoadOrder(m.pools[name])
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cfg.BlockSize != p.cfg.BlockSize && len(p.workers) > 0 {
		return fmt.Errorf("%w: pool %q has workers; block_size %d cannot change to %d", ErrConflict, name, p.cfg.BlockSize, cfg.BlockSize)
	}
	rekey := cfg.BlockSize != p.cfg.BlockSize || cfg.PrefillLoadScale != p.cfg.PrefillLoadScale ||
		cfg.DecodeActiveRequestWeight != p.cfg.DecodeActiveRequestWeight
	p.cfg = cfg
	if rekey {
		p.rekey()
	}
	return nil
}

// GetPool implements Store.
func (m *Memory) GetPool(_ context.Context, name string) (PoolConfig, error) {
	p, err := m.pool(name)
	if err != nil {
		return PoolConfig{}, err
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	cfg := p.cfg
	cfg.Models = append([]string(nil), cfg.Models...)
	return cfg, nil
}

// Pools implements Store.
func (m *Memory) Pools(context.Context) ([]PoolInfo, error) {
	m.mu.RLock()
	out := make([]PoolInfo, 0, len(m.pools))
	for _, p := range m.pools {
		p.mu.RLock()
		out = append(out, PoolInfo{Name: p.name, Config: p.cfg, Workers: len(p.workers)})
		p.mu.RUnlock()
	}
	m.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (p *memPool) newSlot(r *memRank) *rankIndex {
	s := slotID(len(p.slots))
	p.slots = append(p.slots, r)
	ri := newRankIndex(s)
	if tkv := r.worker.spec.TotalKVBlocks; tkv > 0 && p.declared <= presizeMaxEntries {
		ri.byEngine.reserve(int(min(tkv, presizeMaxEntries)))
	}
	return ri
}

// presizeMaxEntries bounds the index presizing from declared capacity (SPEC §9 "Embedded index"): the
// event table is sized on registration for the blocks the pool's ranks declare (total_kv_blocks, up to
// this many, 2^21: a 128 MiB table), and each rank's engine map for its own, while the pool's declared
// total is within it. A cache fills within minutes of serving, and the index then holds about that many
// entries anyway; sizing up front spares the doublings on the way, each of which rehashes the whole
// table under the pool's lock (the last one of a 1 M-entry index: tens of ms during which no decision
// is made), which a profile of replaying the Mooncake trace into an empty index put at ~10 % of its CPU.
// Beyond the bound (thousands of large workers) the tables grow as before, so a registration never
// allocates more than this.
const presizeMaxEntries = 1 << 21

// presize notes a new rank's declared capacity and sizes the event table for the pool's total.
func (p *memPool) presize(r *memRank) {
	tkv := r.worker.spec.TotalKVBlocks
	if tkv <= 0 {
		return
	}
	p.declared = min(p.declared+tkv, 1<<62)
	p.events.m.reserve(int(min(p.declared, presizeMaxEntries)))
}

// clearRank gives r a fresh, empty index; the old one stops counting at once and is reclaimed later.
func (p *memPool) clearRank(r *memRank) {
	old := r.idx
	p.slots[old.slot] = nil
	p.dead = append(p.dead, old)
	r.idx = p.newSlot(r)
}

func (p *memPool) liveSlot(s slotID) bool { return p.slots[s] != nil }

// reclaim processes a bounded amount of deferred deletion: dead indexes, then expired soft entries.
func (p *memPool) reclaim(now int64) {
	budget := reclaimBudget
	for budget > 0 && len(p.dead) > 0 {
		n, done := p.dead[0].reclaim(p.events, budget)
		budget -= n
		if done {
			p.dead[0] = nil
			p.dead = p.dead[1:]
		}
	}
	budget = reclaimBudget
	for budget > 0 && len(p.softLog) > 0 && p.softLog[0].expiry <= now {
		w := p.softLog[0]
		p.softLog = p.softLog[1:]
		if exp, alive := p.soft.sweep(w.seq, w.slot, now, !p.liveSlot(w.slot)); alive {
			w.expiry = exp // slid forward by a later decision: look again then
			p.softLog = append(p.softLog, w)
		}
		budget--
	}
}

// sweepSessions deletes up to sessionSweep idle session bindings expired at now under the pool's session
// TTL (Redis: sweep_sessions). Lookups already ignore expired bindings; this reclaims their memory.
func (p *memPool) sweepSessions(now int64) {
	ttl := p.cfg.SessionAffinityTTLMs
	for n := 0; n < sessionSweep && len(p.idleLog) > 0 && p.idleLog[0].idleAt+ttl <= now; n++ {
		e := p.idleLog[0]
		p.idleLog[0] = idleSession{}
		p.idleLog = p.idleLog[1:]
		if s := p.sessions[e.id]; s != nil && s.active == 0 && s.idleAt == e.idleAt && now >= s.idleAt+ttl {
			delete(p.sessions, e.id)
		}
	}
}

// sessionSweep is how many idle session records one route call sweeps (Redis: SESS_SWEEP).
const sessionSweep = 32

// PutWorker implements Store.
func (m *Memory) PutWorker(_ context.Context, pool string, spec WorkerSpec, now int64) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	p, err := m.pool(pool)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[spec.WorkerID]
	if w == nil {
		if len(p.workers) >= m.limits.maxWorkers() {
			return m.limits.tooManyWorkers(pool)
		}
		w = &memWorker{seenPos: -1}
		p.workers[spec.WorkerID] = w
	}
	w.spec = spec
	w.lastSeen, w.seenKey = now, now
	if w.seenPos < 0 {
		p.bySeen.push(w)
	} else {
		p.bySeen.fix(w)
	}
	n := spec.dpSize()
	for len(w.ranks) < n {
		r := &memRank{worker: w, rank: len(w.ranks)}
		p.presize(r)
		r.idx = p.newSlot(r)
		w.ranks = append(w.ranks, r)
		p.addRank(r)
		p.rosterAdd = append(p.rosterAdd, r)
	}
	for len(w.ranks) > n { // dp_size shrank: drop the extra ranks
		r := w.ranks[len(w.ranks)-1]
		p.detachRank(r)
		w.ranks = w.ranks[:len(w.ranks)-1]
	}
	return nil
}

// detachRank unregisters r: its index stops counting, it leaves the load order and the roster.
func (p *memPool) detachRank(r *memRank) {
	p.slots[r.idx.slot] = nil
	p.dead = append(p.dead, r.idx)
	r.idx = newRankIndex(0)
	p.dropRank(r)
	p.rosterOld = true
}

// rankCmp is the candidate order as a three-way comparison: worker id bytes, then dp rank.
func rankCmp(a, b *memRank) int {
	if c := strings.Compare(a.worker.spec.WorkerID, b.worker.spec.WorkerID); c != 0 {
		return c
	}
	return cmp.Compare(a.rank, b.rank)
}

// rankLess is the candidate order: worker id bytes, then dp rank.
func rankLess(a, b *memRank) bool { return rankCmp(a, b) < 0 }

// roster returns every registered rank in candidate order. Registration and removal only note the
// change; the next caller merges the ranks registered since (O(n + k log k)), so registering n workers
// one by one costs O(n) in total, however the calls interleave with heartbeats.
func (p *memPool) roster() []*memRank {
	if len(p.rosterAdd) == 0 && !p.rosterOld {
		return p.ranks
	}
	add := p.rosterAdd[:0]
	for _, r := range p.rosterAdd {
		if p.attached(r) {
			add = append(add, r)
		}
	}
	sort.Slice(add, func(i, j int) bool { return rankLess(add[i], add[j]) })
	merged := make([]*memRank, 0, len(p.ranks)+len(add))
	i := 0
	for _, r := range p.ranks {
		if p.rosterOld && !p.attached(r) {
			continue
		}
		for i < len(add) && rankLess(add[i], r) {
			merged = append(merged, add[i])
			i++
		}
		merged = append(merged, r)
	}
	merged = append(merged, add[i:]...)
	clear(p.rosterAdd)
	p.ranks, p.rosterAdd, p.rosterOld = merged, p.rosterAdd[:0], false
	return p.ranks
}

// RemoveWorker implements Store.
func (m *Memory) RemoveWorker(_ context.Context, pool, workerID string, now int64) error {
	p, err := m.pool(pool)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[workerID]
	if w == nil {
		return unknownWorker(pool, workerID)
	}
	for _, r := range w.ranks {
		p.detachRank(r)
	}
	delete(p.workers, workerID)
	delete(p.marked, w)
	p.bySeen.remove(w)
	p.reclaim(now)
	return nil
}

// healthChanged keeps the set of marked workers after w's health changed.
func (p *memPool) healthChanged(w *memWorker) {
	if w.health.until != 0 {
		p.marked[w] = struct{}{}
	} else {
		delete(p.marked, w)
	}
}

func (p *memPool) kvEvents(w *memWorker) bool {
	if w.spec.KVEvents != nil {
		return *w.spec.KVEvents
	}
	return p.cfg.KVEvents
}

func (p *memPool) live(w *memWorker, now int64) bool {
	return p.cfg.WorkerTTLMs == 0 || now < w.lastSeen+p.cfg.WorkerTTLMs
}

// Workers implements Store.
func (m *Memory) Workers(ctx context.Context, pool string, now int64) ([]WorkerInfo, error) {
	return AllWorkers(ctx, m, pool, now)
}

// ListWorkers implements Store: O(log W) to find the page in the sorted roster, then O(ranks listed): at
// most limit workers and MaxWorkersPageRanks ranks, the rule workers.lua applies (WorkersQuery).
func (m *Memory) ListWorkers(_ context.Context, pool string, q WorkersQuery, now int64) (WorkerPage, error) {
	p, err := m.pool(pool)
	if err != nil {
		return WorkerPage{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseExpired(now)
	ros := p.roster()
	// the first candidate of a worker listed after q.After (the roster is in worker id byte order, then rank)
	i := sort.Search(len(ros), func(i int) bool { return ros[i].worker.spec.WorkerID > q.After })
	limit := q.limit()
	out := make([]WorkerInfo, 0, min(limit, len(p.workers)))
	next, ranks := "", 0
	for ; i < len(ros); i++ {
		r := ros[i]
		if r.rank != 0 { // a worker's ranks are consecutive in the roster, rank 0 first
			continue
		}
		w := r.worker
		if len(out) == limit || (len(out) > 0 && ranks+len(w.ranks) > MaxWorkersPageRanks) {
			next = out[len(out)-1].WorkerID
			break
		}
		ranks += len(w.ranks)
		info := WorkerInfo{WorkerSpec: w.spec, KVEventsEffective: p.kvEvents(w), Live: p.live(w, now), LastSeenMs: w.lastSeen,
			Health: w.health.info(now, p.cfg.UnhealthyAfter)}
		if info.DPSize == 0 {
			info.DPSize = 1
		}
		for _, r := range w.ranks {
			info.Ranks = append(info.Ranks, RankInfo{
				DPRank: r.rank, ActivePrefillTokens: r.load.PrefillTokens, ActiveDecodeBlocks: r.load.DecodeBlocks,
				ActiveRequests: r.load.Requests, CachedBlocks: r.idx.held, LastEventID: r.lastEventID,
				Epoch: r.epoch, Degraded: r.degraded, TTFT: ttftShown(r.ttft),
			})
		}
		out = append(out, info)
	}
	return WorkerPage{Workers: out, Next: next, ReclaimPending: len(p.dead)}, nil
}

// leaseHeap is a min-heap of leases by expiry (then id, for a deterministic release order).
type leaseHeap []*memLease

func (h leaseHeap) Len() int { return len(h) }
func (h leaseHeap) Less(i, j int) bool {
	if h[i].expiry != h[j].expiry {
		return h[i].expiry < h[j].expiry
	}
	return h[i].id < h[j].id
}
func (h leaseHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}
func (h *leaseHeap) Push(x any) {
	l := x.(*memLease)
	l.heapIdx = len(*h)
	*h = append(*h, l)
}
func (h *leaseHeap) Pop() any {
	old := *h
	l := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	l.heapIdx = -1
	return l
}

// releaseExpired releases every lease whose expiry is at or before now (SPEC §6.3: from that instant on
// it no longer counts). A session whose last request lease expired goes idle at the expiry instant.
func (p *memPool) releaseExpired(now int64) {
	for len(p.byExpiry) > 0 && p.byExpiry[0].expiry <= now {
		l := heap.Pop(&p.byExpiry).(*memLease)
		p.endLease(l, l.expiry)
	}
}

// releaseListed ends the leases ids name, as Done at now does after releaseExpired (RouteRequest.Releases;
// lib.lua release_expired's listed ids); an id with no lease is skipped.
func (p *memPool) releaseListed(ids []string, now int64) {
	for _, id := range ids {
		if l := p.leases[id]; l != nil {
			p.finishLease(l, now)
		}
	}
}

// finishLease ends a lease before its expiry (a done at now): out of the expiry heap, then endLease.
func (p *memPool) finishLease(l *memLease, now int64) {
	heap.Remove(&p.byExpiry, l.heapIdx)
	p.endLease(l, now)
}

// endLease releases a lease's remaining load and its session hold at time t.
func (p *memPool) endLease(l *memLease, t int64) {
	l.rank.load.PrefillTokens -= l.prefill
	l.rank.load.DecodeBlocks -= l.decode
	l.rank.load.Requests--
	p.loadChanged(l.rank)
	delete(p.leases, l.id)
	if l.session != "" {
		if s := p.sessions[l.session]; s != nil && s.gen == l.sessionGen && s.active > 0 {
			s.active--
			if s.active == 0 {
				s.idleAt = t
				p.idleLog = append(p.idleLog, idleSession{l.session, t})
			}
		}
	}
}

func (m *Memory) poolsFor(pool string) ([]*memPool, error) {
	if pool != "" {
		p, err := m.pool(pool)
		if err != nil {
			return nil, err
		}
		return []*memPool{p}, nil
	}
	m.mu.RLock()
	names := make([]string, 0, len(m.pools))
	for n := range m.pools {
		names = append(names, n)
	}
	m.mu.RUnlock()
	sort.Strings(names)
	out := make([]*memPool, 0, len(names))
	for _, n := range names {
		if p, err := m.pool(n); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// withLease finds lease id (in pool, or in every pool when pool is "") after releasing expired leases,
// and applies f to it under its pool's lock (an id held in several pools: in each). It reports whether
// the lease existed.
func (m *Memory) withLease(pool, id string, now int64, f func(p *memPool, l *memLease)) (bool, error) {
	ps, err := m.poolsFor(pool)
	if err != nil {
		return false, err
	}
	found := false
	for _, p := range ps { // every pool, as the Redis store asks them all at once (redis_route.go lease)
		p.mu.Lock()
		p.releaseExpired(now)
		l := p.leases[id]
		if l != nil {
			f(p, l)
			found = true
		}
		p.mu.Unlock()
	}
	return found, nil
}

// PrefillDone implements Store.
func (m *Memory) PrefillDone(_ context.Context, pool, id string, now int64) (bool, error) {
	return m.withLease(pool, id, now, func(p *memPool, l *memLease) {
		l.rank.load.PrefillTokens -= l.prefill
		l.prefill = 0
		p.loadChanged(l.rank)
		p.calibrate(l, now)
	})
}

// Done implements Store.
func (m *Memory) Done(_ context.Context, pool, id string, now int64) (bool, error) {
	return m.withLease(pool, id, now, func(p *memPool, l *memLease) { p.finishLease(l, now) })
}

// RenewLease implements Store.
func (m *Memory) RenewLease(_ context.Context, pool, id string, now int64) (bool, error) {
	return m.withLease(pool, id, now, func(p *memPool, l *memLease) {
		l.expiry = now + p.cfg.LeaseTTLMs
		heap.Fix(&p.byExpiry, l.heapIdx)
	})
}
