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
	byEngine  map[uint64]uint64 // engine hash → sequence hash
	blocks    map[uint64]rankBlock
	held      int64 // blocks with tiers != 0
	orphans   int64 // held blocks at pos > 0 whose parent is not held
	nonDevice int64 // held blocks without the device tier
}

func newRankIndex(slot slotID) *rankIndex {
	return &rankIndex{slot: slot, byEngine: map[uint64]uint64{}, blocks: map[uint64]rankBlock{}}
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

// eventIndex is the pool-wide event layer: sequence hash → holding slots.
type eventIndex map[uint64][]slotID

func (ix eventIndex) add(seq uint64, s slotID) {
	ix[seq] = append(ix[seq], s)
}

func (ix eventIndex) remove(seq uint64, s slotID) {
	hs := ix[seq]
	for i, h := range hs {
		if h == s {
			hs[i] = hs[len(hs)-1]
			hs = hs[:len(hs)-1]
			break
		}
	}
	if len(hs) == 0 {
		delete(ix, seq)
	} else {
		ix[seq] = hs
	}
}

// store marks seq (at pos, child of parent) held in tier t on rank r. It reports whether anything changed.
func (r *rankIndex) store(ix eventIndex, seq, parent uint64, pos int32, engine uint64, t Tier) bool {
	r.byEngine[engine] = seq
	b, ok := r.blocks[seq]
	bit := uint8(1) << t
	if ok && b.tiers != 0 {
		if b.tiers&bit != 0 {
			return false
		}
		hadDevice := b.tiers&(1<<TierDevice) != 0
		b.tiers |= bit
		if !hadDevice && t == TierDevice {
			r.nonDevice--
		}
		r.blocks[seq] = b
		return true
	}
	// Newly held (or revived placeholder).
	b.parent, b.pos, b.tiers = parent, pos, bit
	r.blocks[seq] = b
	r.held++
	if t != TierDevice {
		r.nonDevice++
	}
	r.orphans -= int64(b.children) // its held children are attached again
	if pos > 0 {
		p := r.blocks[parent]
		p.children++
		r.blocks[parent] = p
		if p.tiers == 0 {
			r.orphans++
		}
	}
	ix.add(seq, r.slot)
	return true
}

// unstore drops tier t of seq on rank r; it reports whether the rank held seq in that tier.
func (r *rankIndex) unstore(ix eventIndex, seq uint64, engine uint64, t Tier) bool {
	b, ok := r.blocks[seq]
	bit := uint8(1) << t
	if !ok || b.tiers&bit == 0 {
		return false
	}
	hadDevice := b.tiers&(1<<TierDevice) != 0
	b.tiers &^= bit
	if b.tiers != 0 {
		if hadDevice && t == TierDevice {
			r.nonDevice++
		}
		r.blocks[seq] = b
		return true
	}
	// No longer held.
	delete(r.byEngine, engine)
	r.held--
	if !hadDevice {
		r.nonDevice--
	}
	r.orphans += int64(b.children)
	if b.pos > 0 {
		p := r.blocks[b.parent]
		if p.tiers == 0 {
			r.orphans-- // it was an orphan itself
		}
		p.children--
		if p.tiers == 0 && p.children == 0 {
			delete(r.blocks, b.parent)
		} else {
			r.blocks[b.parent] = p
		}
	}
	if b.children == 0 {
		delete(r.blocks, seq)
	} else {
		r.blocks[seq] = b
	}
	ix.remove(seq, r.slot)
	return true
}

// holds reports whether rank r holds seq in any tier.
func (r *rankIndex) holds(seq uint64) bool {
	return r.blocks[seq].tiers != 0
}

// reclaim deletes up to budget of a dead rank index's entries from the pool index; it returns the
// number of entries processed and whether the index is now empty.
func (r *rankIndex) reclaim(ix eventIndex, budget int) (int, bool) {
	n := 0
	for seq, b := range r.blocks {
		if n >= budget {
			return n, false
		}
		if b.tiers != 0 {
			ix.remove(seq, r.slot)
		}
		delete(r.blocks, seq)
		n++
	}
	clear(r.byEngine)
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
