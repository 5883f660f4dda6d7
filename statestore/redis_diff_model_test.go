package statestore_test

import (
	"sort"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// The differential generator's bookkeeping: what each registered (pool, worker, dp_rank) holds after
// the events the generator issued, mirroring SPEC §4.1 (fences, restarts, tiers, engine-hash links), so
// that parents and removals are drawn from blocks the stores really hold. It is a steering aid, not a
// judge: the two stores judge each other. Its predictions are compared with the memory store's results
// only to count how often it is right (a low rate means the generator has drifted, see diffCoverage).

// mBlock is where a held sequence hash sits: its parent and its place in a document, so a child can
// continue the same document (stored chains stay prefixes of the prompts the routes send).
type mBlock struct {
	parent    uint64
	hasParent bool
	doc, pos  int // document index and block index in it (pos -1: off-document)
}

// mRank mirrors one (worker, dp_rank) of one pool.
type mRank struct {
	// The store's fence (SPEC §4.1): the epoch and the last applied event id.
	epoch  string
	hasID  bool
	lastID uint64
	// The generator's side of the engine: the next id and epoch it issues.
	genID    uint64
	genEpoch int

	byEngine map[uint64]uint64 // engine hash → sequence hash (as the stores keep it)
	held     map[uint64]uint8  // sequence hash → tiers held (bit 1<<tier)
	where    map[uint64]mBlock // sequence hash → parent and document place (kept after removal)

	version  int                 // bumped by every change of held blocks
	cache    map[[2]int][]uint64 // liveEngines results at cacheVer
	cacheVer int
}

func newMRank() *mRank {
	return &mRank{byEngine: map[uint64]uint64{}, held: map[uint64]uint8{}, where: map[uint64]mBlock{}}
}

func (r *mRank) clear() {
	r.byEngine, r.held = map[uint64]uint64{}, map[uint64]uint8{}
	r.version++
}

// fence mirrors the stores' per-rank fence and reports whether ev is applied.
func (r *mRank) fence(ev *statestore.Event, res *statestore.ApplyResult) bool {
	if ev.Epoch != "" && r.epoch != ev.Epoch {
		if r.epoch != "" {
			r.clear()
			r.hasID, r.lastID = false, 0
			res.Restarts++
		}
		r.epoch = ev.Epoch
	}
	if !ev.HasEventID {
		return true
	}
	if r.hasID && ev.EventID <= r.lastID {
		res.Stale++
		return false
	}
	r.hasID, r.lastID = true, ev.EventID
	return true
}

// liveEngines returns, sorted (so runs are reproducible), the engine hashes whose block is held in tier
// t (t < 0: any tier); leafOnly keeps only blocks without a held child.
func (r *mRank) liveEngines(t int, leafOnly bool) []uint64 {
	key := [2]int{t, b2i(leafOnly)}
	if r.cacheVer != r.version || r.cache == nil {
		r.cache, r.cacheVer = map[[2]int][]uint64{}, r.version
	}
	if out, ok := r.cache[key]; ok {
		return out
	}
	var inner map[uint64]bool
	if leafOnly {
		inner = map[uint64]bool{}
		for s := range r.held {
			if b := r.where[s]; b.hasParent {
				inner[b.parent] = true
			}
		}
	}
	var out []uint64
	for e, s := range r.byEngine {
		tiers := r.held[s]
		if tiers == 0 || t >= 0 && tiers&(1<<t) == 0 || leafOnly && inner[s] {
			continue
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	r.cache[key] = out
	return out
}

// hasHeldChild reports whether some held block of the rank continues seq.
func (r *mRank) hasHeldChild(seq uint64) bool {
	for s := range r.held {
		if b := r.where[s]; b.hasParent && b.parent == seq {
			return true
		}
	}
	return false
}

// store mirrors one Stored block; it reports whether a tier was added.
func (r *mRank) store(eh, seq uint64, b mBlock, t statestore.Tier) bool {
	r.version++
	r.byEngine[eh] = seq
	if _, ok := r.where[seq]; !ok || r.held[seq] == 0 {
		r.where[seq] = b
	}
	bit := uint8(1) << t
	if r.held[seq]&bit != 0 {
		return false
	}
	r.held[seq] |= bit
	return true
}

// remove mirrors one removed hash: hit reports a held block in tier t; inner that the block left the
// rank while a held child still continued it.
func (r *mRank) remove(eh uint64, t statestore.Tier) (hit, inner bool) {
	seq, ok := r.byEngine[eh]
	bit := uint8(1) << t
	if !ok || r.held[seq]&bit == 0 {
		return false, false
	}
	r.version++
	r.held[seq] &^= bit
	if r.held[seq] != 0 {
		return true, false
	}
	delete(r.held, seq)
	delete(r.byEngine, eh)
	return true, r.hasHeldChild(seq)
}

// mWorker mirrors a registered worker's ranks.
type mWorker struct{ ranks []*mRank }

// diffCoverage counts what a differential run exercised; minimums per seed are asserted (see
// assertCoverage) so the test fails when the generator degrades instead of silently testing less.
type diffCoverage struct {
	Events          int // events generated
	StoredApplied   int // Stored events applied (memory store's result: applied, not dropped)
	ParentMissing   int // Stored events dropped for an unknown parent
	StoredBlocks    int // blocks newly stored or given a new tier
	RemovedHits     int // removed hashes that hit a held block (memory store's result)
	RemovedUnknown  int // removed hashes that named nothing held (block_not_found)
	RemovedLeaf     int // hits on a block without a held child (generator's model, batches it predicted)
	RemovedInner    int // hits on a block with a held child: breaks prefix closure
	UnknownWorker   int // events dropped for an unregistered worker or rank
	Restarts        int // new epochs that cleared a rank
	Clears          int // Cleared events applied
	Routes          int // successful routes
	RoutesOverlap   int // routes with overlap > 0
	SessionHits     int // routes decided by a live session binding
	SoftHits        int // explained candidates with approximate/predicted overlap > 0
	HostMatched     int // explained candidates with host-tier matched blocks
	DiskMatched     int // explained candidates with disk-tier matched blocks
	ModelAgree      int // batches whose result the generator's model predicted exactly
	ModelDisagree   int
	WorkersCompared int // workers listings compared after a changing step
	Explains        int // explains compared
	PagedExplains   int // Redis explains read in more than one page (seeds with a small page size)
	RouteReleases   int // lease ids carried by routes (RouteRequest.Releases)
}

// seqOf returns the sequence hash of a block with local hash l continuing parent (or the root).
func seqOf(parent uint64, hasParent bool, l uint64) uint64 {
	if hasParent {
		return blockhash.Next(parent, l)
	}
	return l
}
