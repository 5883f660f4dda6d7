package statestore

// The embedded prefix index. Two layers per pool:
//
//   - the event index: sequence hash → slots (ranks) holding that exact prefix block, fed by engine
//     events. Each rank also keeps its own blocks (sequence hash → position, parent, tiers) and the
//     engine-hash → sequence-hash map that links Stored parents and addresses removals.
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
// search, so the result is exact either way.

type slotID uint32

// rankBlock is one block a rank holds (or held: a placeholder with tiers 0 survives while it still has
// held children, so that re-storing it can un-orphan them).
type rankBlock struct {
	parent   uint64 // parent sequence hash (unused at pos 0)
	pos      int32  // position in the prompt, 0-based
	tiers    uint8  // bit (1<<Tier) per tier held; 0 = not held
	children int32  // held children on this rank
}

// rankIndex is one slot's view of one (worker, dp_rank).
type rankIndex struct {
	slot      slotID
	byEngine  u64Map[uint64] // engine hash → sequence hash
	blocks    u64Map[rankBlock]
	reclaimAt int   // reclamation cursor (table slot of blocks) once the index is dead
	held      int64 // blocks with tiers != 0
	orphans   int64 // held blocks at pos > 0 whose parent is not held
	nonDevice int64 // held blocks without the device tier
}

func newRankIndex(slot slotID) *rankIndex {
	return &rankIndex{slot: slot}
}

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

// holders is the set of slots holding one block: up to three inline (most blocks are held by one or a
// few ranks); more spill into eventIndex.over. It holds no pointer, so the pool's largest table is not
// scanned by the garbage collector.
type holders struct {
	inline [3]slotID
	n      int32
}

const inlineHolders = 3

// eventIndex is the pool-wide event layer: sequence hash → holding slots.
type eventIndex struct {
	m    u64Map[holders]
	over map[uint64][]slotID // holders beyond the inline ones, by sequence hash
}

// at returns the j-th holder of h (the holders of seq).
func (ix *eventIndex) at(seq uint64, h *holders, j int) slotID {
	if j < inlineHolders {
		return h.inline[j]
	}
	return ix.over[seq][j-inlineHolders]
}

func (ix *eventIndex) contains(seq uint64, h *holders, s slotID) bool {
	for j := 0; j < int(h.n); j++ {
		if ix.at(seq, h, j) == s {
			return true
		}
	}
	return false
}

func (ix *eventIndex) add(seq uint64, s slotID) {
	h := ix.m.Ref(seq)
	if h.n < inlineHolders {
		h.inline[h.n] = s
	} else {
		if ix.over == nil {
			ix.over = map[uint64][]slotID{}
		}
		ix.over[seq] = append(ix.over[seq], s)
	}
	h.n++
}

// remove deletes s from the holders of seq (swapping in the last holder).
func (ix *eventIndex) remove(seq uint64, s slotID) {
	i := ix.m.find(seq)
	if i < 0 {
		return
	}
	h := &ix.m.slots[i].val
	for j := 0; j < int(h.n); j++ {
		if ix.at(seq, h, j) != s {
			continue
		}
		last := ix.at(seq, h, int(h.n)-1)
		if j < inlineHolders {
			h.inline[j] = last
		} else {
			ix.over[seq][j-inlineHolders] = last
		}
		if h.n > inlineHolders {
			if o := ix.over[seq]; len(o) == 1 {
				delete(ix.over, seq)
			} else {
				ix.over[seq] = o[:len(o)-1]
			}
		}
		h.n--
		break
	}
	if h.n == 0 {
		ix.m.deleteAt(i)
	}
}

// get returns the holders of seq (nil if none); valid until the index changes.
func (ix *eventIndex) get(seq uint64) *holders {
	if i := ix.m.find(seq); i >= 0 {
		return &ix.m.slots[i].val
	}
	return nil
}

// store marks seq (at pos, child of parent) held in tier t on rank r. It reports whether anything changed.
func (r *rankIndex) store(ix *eventIndex, seq, parent uint64, pos int32, engine uint64, t Tier) bool {
	r.byEngine.Put(engine, seq)
	b := r.blocks.Ref(seq) // valid until the parent's Ref below
	bit := uint8(1) << t
	if b.tiers != 0 {
		if b.tiers&bit != 0 {
			return false
		}
		if b.tiers&(1<<TierDevice) == 0 && t == TierDevice {
			r.nonDevice--
		}
		b.tiers |= bit
		return true
	}
	// Newly held (or revived placeholder).
	b.parent, b.pos, b.tiers = parent, pos, bit
	r.held++
	if t != TierDevice {
		r.nonDevice++
	}
	r.orphans -= int64(b.children) // its held children are attached again
	if pos > 0 {
		p := r.blocks.Ref(parent)
		p.children++
		if p.tiers == 0 {
			r.orphans++
		}
	}
	ix.add(seq, r.slot)
	return true
}

// unstore drops tier t of the block that engine-table slot ei (r.byEngine.find(engine)) maps to; it
// reports whether the rank held that block in that tier.
func (r *rankIndex) unstore(ix *eventIndex, ei int, t Tier) bool {
	seq := r.byEngine.slots[ei].val
	bi := r.blocks.find(seq)
	if bi < 0 {
		return false
	}
	b := &r.blocks.slots[bi].val
	bit := uint8(1) << t
	if b.tiers&bit == 0 {
		return false
	}
	hadDevice := b.tiers&(1<<TierDevice) != 0
	b.tiers &^= bit
	if b.tiers != 0 {
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
	r.orphans += int64(b.children)
	parent, pos := b.parent, b.pos
	if b.children == 0 {
		r.blocks.deleteAt(bi) // b is invalid from here on
	}
	if pos > 0 {
		pi := r.blocks.find(parent)
		p := &r.blocks.slots[pi].val
		if p.tiers == 0 {
			r.orphans-- // it was an orphan itself
		}
		p.children--
		if p.tiers == 0 && p.children == 0 {
			r.blocks.deleteAt(pi)
		}
	}
	ix.remove(seq, r.slot)
	return true
}

// holds reports whether rank r holds seq in any tier.
func (r *rankIndex) holds(seq uint64) bool {
	b, _ := r.blocks.Get(seq)
	return b.tiers != 0
}

// reclaim removes up to budget of a dead rank index's entries from the pool index, resuming where the
// previous call stopped; it returns the number of table slots visited and whether it finished.
func (r *rankIndex) reclaim(ix *eventIndex, budget int) (int, bool) {
	n := 0
	for ; r.reclaimAt < len(r.blocks.slots); r.reclaimAt++ {
		if n >= budget {
			return n, false
		}
		n++
		if sl := &r.blocks.slots[r.reclaimAt]; sl.used && sl.val.tiers != 0 {
			ix.remove(sl.key, r.slot)
		}
	}
	r.blocks, r.byEngine = u64Map[rankBlock]{}, u64Map[uint64]{}
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
