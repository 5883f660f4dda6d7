package statestore

// The embedded prefix index. Two layers per pool:
//
//   - the event index: sequence hash → the block's parent (a sequence hash names an exact prefix, so its
//     parent is the same on every worker) and the slots (ranks) holding it, each with its tiers and its
//     count of held children on that rank. One table serves lookups and per-rank bookkeeping, so an event
//     block costs one probe into it; each rank only adds its engine-hash → sequence-hash map, which links
//     Stored parents and addresses removals (engine hashes are opaque per worker).
//   - the soft index: sequence hash → (slot, expiry ms) written by routing decisions (approximate mode
//     and predict-on-route), ignored once expired, swept incrementally.
//
// A slot is one incarnation of one (worker, dp_rank) index. Clearing a rank (Cleared event, restart,
// removal) gives it a fresh slot: entries of the old slot stop counting at once, because lookups skip
// slots that are not current, and their memory is reclaimed a bounded number of entries per call.
//
// Exactness of the jump search: a rank's held set is prefix-closed when every held block's parent is
// held. Stored events always attach to a held parent, so only removals of inner blocks break that; each
// rank counts such orphans. Ranks with orphans > 0 are matched by a linear walk, others by the jump
// search, so the result is exact either way. A holder with tiers 0 is a placeholder: the rank no longer
// holds the block but still holds children of it, so that re-storing it can attach them again.

type slotID uint32

// holder is one rank's hold on one block.
type holder struct {
	slot     slotID
	tiers    uint8 // bit (1<<Tier) per tier held; 0 = placeholder
	children int32 // this rank's held children of the block
}

// blockEntry is one block of the event index. It holds no pointer, so the garbage collector never scans
// the pool's largest table, and with its key it is 32 bytes, two to a cache line: the table is probed
// at random, so its size decides how many probes miss the cache and the TLB.
type blockEntry struct {
	parent uint64 // parent sequence hash (when hasParent)
	inline [inlineHolders]holder
	nh     uint32 // holders (inline first, then eventIndex.over) | hasParentBit
}

// One inline holder: on the Mooncake replay 99.99 % of blocks have exactly one holder (sessions stick to
// a worker); shared prefixes take the overflow map.
const inlineHolders = 1

const hasParentBit = 1 << 31

func (e *blockEntry) count() int         { return int(e.nh &^ hasParentBit) }
func (e *blockEntry) hasParent() bool    { return e.nh&hasParentBit != 0 }
func (e *blockEntry) setParent(p uint64) { e.parent, e.nh = p, e.nh|hasParentBit }

// eventIndex is the pool-wide event layer.
type eventIndex struct {
	m    u64Map[blockEntry]
	over map[uint64][]holder // holders beyond the inline ones, by sequence hash
}

// holderAt returns the j-th holder of e (the entry of seq); valid until the index changes.
func (ix *eventIndex) holderAt(seq uint64, e *blockEntry, j int) *holder {
	if j < inlineHolders {
		return &e.inline[j]
	}
	return &ix.over[seq][j-inlineHolders]
}

// findHolder returns the index of slot s among e's holders, or -1.
func (ix *eventIndex) findHolder(seq uint64, e *blockEntry, s slotID) int {
	n := e.count()
	for j := 0; j < n && j < inlineHolders; j++ {
		if e.inline[j].slot == s {
			return j
		}
	}
	if n > inlineHolders {
		for j, h := range ix.over[seq] { // one map access for all overflow holders
			if h.slot == s {
				return inlineHolders + j
			}
		}
	}
	return -1
}

// addHolder appends h to e's holders and returns its index.
func (ix *eventIndex) addHolder(seq uint64, e *blockEntry, h holder) int {
	j := e.count()
	if j < inlineHolders {
		e.inline[j] = h
	} else {
		if ix.over == nil {
			ix.over = map[uint64][]holder{}
		}
		ix.over[seq] = append(ix.over[seq], h)
	}
	e.nh++
	return j
}

// removeHolder deletes holder j of the entry in table slot ti (swapping in the last holder), and the
// entry itself when no holder is left. Table indexes and pointers are invalid afterwards.
func (ix *eventIndex) removeHolder(seq uint64, ti, j int) {
	e := &ix.m.slots[ti].val
	last := e.count() - 1
	*ix.holderAt(seq, e, j) = *ix.holderAt(seq, e, last)
	if last >= inlineHolders {
		if o := ix.over[seq]; len(o) == 1 {
			delete(ix.over, seq)
		} else {
			ix.over[seq] = o[:len(o)-1]
		}
	}
	e.nh--
	if e.count() == 0 {
		ix.m.deleteAt(ti)
	}
}

// entry returns the entry of seq (nil if none); valid until the index changes.
func (ix *eventIndex) entry(seq uint64) *blockEntry {
	if i := ix.m.find(seq); i >= 0 {
		return &ix.m.slots[i].val
	}
	return nil
}

// tiersOf returns the tiers in which slot s holds seq (0: not held).
func (ix *eventIndex) tiersOf(seq uint64, s slotID) uint8 {
	e := ix.entry(seq)
	if e == nil {
		return 0
	}
	if j := ix.findHolder(seq, e, s); j >= 0 {
		return ix.holderAt(seq, e, j).tiers
	}
	return 0
}

// rankIndex is one slot's view of one (worker, dp_rank).
type rankIndex struct {
	slot      slotID
	byEngine  u64Map[uint64] // engine hash → sequence hash
	reclaimAt int            // reclamation cursor (table slot of byEngine) once the index is dead
	held      int64          // blocks held in some tier
	orphans   int64          // held blocks with a parent whose parent is not held
	nonDevice int64          // held blocks without the device tier
}

func newRankIndex(slot slotID) *rankIndex { return &rankIndex{slot: slot} }

// bestTier returns the best (lowest) tier in a tier mask.
func bestTier(tiers uint8) Tier {
	switch {
	case tiers&(1<<TierDevice) != 0:
		return TierDevice
	case tiers&(1<<TierHost) != 0:
		return TierHost
	}
	return TierDisk
}

// holderOf returns rank r's holder of seq, creating the entry (with its parent link) and a placeholder
// holder as needed, and the entry's table slot. hint is a table slot that may hold seq already (−1:
// none); it saves the probe when it does. The pointers and the slot are valid until the index changes.
func (r *rankIndex) holderOf(ix *eventIndex, seq, parent uint64, hasParent bool, hint int) (*holder, *blockEntry, int) {
	ti, inserted := hint, false
	if !ix.m.holds(hint, seq) {
		ti, inserted = ix.m.refIndex(seq)
	}
	e := &ix.m.slots[ti].val
	if inserted && hasParent {
		e.setParent(parent)
	}
	j := ix.findHolder(seq, e, r.slot)
	if j < 0 {
		j = ix.addHolder(seq, e, holder{slot: r.slot})
	}
	return ix.holderAt(seq, e, j), e, ti
}

// store marks seq (child of parent when hasParent) held in tier t on rank r, stored by the engine under
// engine. It reports whether anything changed, and returns seq's event-table slot (valid until the
// next insertion or deletion). parentAt is a table slot that may hold the parent (−1: unknown): a
// Stored event's blocks are a chain, so the previous block's slot saves the parent's probe; insertions
// never move an entry (linear probing) unless the table grows, and the key check catches that.
func (r *rankIndex) store(ix *eventIndex, seq, parent uint64, hasParent bool, engine uint64, t Tier, parentAt int) (bool, int) {
	r.byEngine.Put(engine, seq)
	h, e, ti := r.holderOf(ix, seq, parent, hasParent, -1)
	bit := uint8(1) << t
	if h.tiers != 0 {
		if h.tiers&bit != 0 {
			return false, ti
		}
		if h.tiers&(1<<TierDevice) == 0 && t == TierDevice {
			r.nonDevice--
		}
		h.tiers |= bit
		return true, ti
	}
	// Newly held (or a revived placeholder: its held children are attached again).
	h.tiers = bit
	r.held++
	if t != TierDevice {
		r.nonDevice++
	}
	r.orphans -= int64(h.children)
	if e.hasParent() {
		p, _, _ := r.holderOf(ix, e.parent, 0, false, parentAt) // may insert: h, e and ti are stale after this
		p.children++
		if p.tiers == 0 {
			r.orphans++
		}
		if !ix.m.holds(ti, seq) {
			ti = -1 // the parent's insertion grew the table
		}
	}
	return true, ti
}

// unstore drops tier t of the block that engine-table slot ei (r.byEngine.find(engine)) maps to; it
// reports whether the rank held that block in that tier.
func (r *rankIndex) unstore(ix *eventIndex, ei int, t Tier) bool {
	seq := r.byEngine.slots[ei].val
	ti := ix.m.find(seq)
	if ti < 0 {
		return false
	}
	e := &ix.m.slots[ti].val
	j := ix.findHolder(seq, e, r.slot)
	if j < 0 {
		return false
	}
	h := ix.holderAt(seq, e, j)
	bit := uint8(1) << t
	if h.tiers&bit == 0 {
		return false
	}
	hadDevice := h.tiers&(1<<TierDevice) != 0
	h.tiers &^= bit
	if h.tiers != 0 {
		if hadDevice && t == TierDevice {
			r.nonDevice++
		}
		return true
	}
	// No longer held.
	r.byEngine.deleteAt(ei)
	r.held--
	if !hadDevice {
		r.nonDevice--
	}
	r.orphans += int64(h.children)
	parent, hasParent := e.parent, e.hasParent()
	if h.children == 0 {
		ix.removeHolder(seq, ti, j) // e and h are invalid from here on
	}
	if hasParent {
		r.dropChild(ix, parent)
	}
	return true
}

// dropChild decrements the held-children count of rank r's holder of parent, removing the holder when
// it is a placeholder left without children.
func (r *rankIndex) dropChild(ix *eventIndex, parent uint64) {
	pti := ix.m.find(parent)
	if pti < 0 {
		return
	}
	pe := &ix.m.slots[pti].val
	pj := ix.findHolder(parent, pe, r.slot)
	if pj < 0 {
		return
	}
	p := ix.holderAt(parent, pe, pj)
	if p.tiers == 0 {
		r.orphans-- // the child was an orphan itself
	}
	p.children--
	if p.tiers == 0 && p.children == 0 {
		ix.removeHolder(parent, pti, pj)
	}
}

// reclaim removes up to budget of a dead rank index's holds from the pool index, resuming where the
// previous call stopped; it returns the number of table slots visited and whether it finished. Every
// placeholder of the rank is the parent of a held block, so dropping the held blocks' parent links
// removes the placeholders too.
func (r *rankIndex) reclaim(ix *eventIndex, budget int) (int, bool) {
	n := 0
	for ; r.reclaimAt < len(r.byEngine.slots); r.reclaimAt++ {
		if n >= budget {
			return n, false
		}
		n++
		if !r.byEngine.usedAt(r.reclaimAt) {
			continue
		}
		seq := r.byEngine.slots[r.reclaimAt].val
		ti := ix.m.find(seq)
		if ti < 0 {
			continue
		}
		e := &ix.m.slots[ti].val
		j := ix.findHolder(seq, e, r.slot)
		if j < 0 || ix.holderAt(seq, e, j).tiers == 0 {
			continue
		}
		parent, hasParent := e.parent, e.hasParent()
		ix.holderAt(seq, e, j).tiers = 0
		if ix.holderAt(seq, e, j).children == 0 {
			ix.removeHolder(seq, ti, j)
		}
		if hasParent {
			r.dropChild(ix, parent)
		}
	}
	r.byEngine = u64Map[uint64]{}
	return n, true
}

// softHolder is one approximate/predicted entry: slot s holds the block until expiry (ms, exclusive).
type softHolder struct {
	slot   slotID
	expiry int64
}

// softIndex is the pool-wide soft layer.
type softIndex map[uint64][]softHolder

// put writes (or slides) the entry of slot s on seq.
func (sx softIndex) put(seq uint64, s slotID, expiry int64) {
	hs := sx[seq]
	for i := range hs {
		if hs[i].slot == s {
			hs[i].expiry = expiry
			return
		}
	}
	sx[seq] = append(hs, softHolder{slot: s, expiry: expiry})
}

// sweep deletes the entry of slot s on seq if it expired at or before now or s is dead. It returns the
// entry's expiry when the entry lives on (it was slid forward), so the caller can requeue it.
func (sx softIndex) sweep(seq uint64, s slotID, now int64, dead bool) (int64, bool) {
	hs := sx[seq]
	for i := range hs {
		if hs[i].slot != s {
			continue
		}
		if !dead && hs[i].expiry > now {
			return hs[i].expiry, true
		}
		hs[i] = hs[len(hs)-1]
		hs = hs[:len(hs)-1]
		break
	}
	if len(hs) == 0 {
		delete(sx, seq)
	} else {
		sx[seq] = hs
	}
	return 0, false
}
