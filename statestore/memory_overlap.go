package statestore

// Overlap lookup over the embedded index: a jump search (SPEC §5). The matched depth of every rank is
// found by probing the end of windows of growing length (JumpStride, then doubling: positions 32, 96,
// 224, 480, …) and binary-searching back only for the ranks that stop matching inside a window, so a
// query costs O(log D + W·log D) lookups on prefix-closed data (a fixed stride J costs O(D/J): 64 window
// probes for a 2,048-block prompt instead of 7). On prefix-closed data any probe order brackets the same
// boundary, so the depth does not depend on the windows. Ranks whose held set is not prefix-closed
// (orphans > 0) are walked linearly instead, so the result is always exact. The same algorithm (same
// windows, same binary search) runs in route.lua.

// holderFunc reports the current slots holding seq (the caller filters dead slots).
type holderSet interface {
	// slotsAt returns the live slots holding the block at query position i.
	contains(i int, s slotID) bool
	// at returns the live slots holding the block at position i.
	at(i int) []slotID
}

// jumpDepths fills depth[s] with the matched prefix depth of every slot in candidates found by the jump
// search over positions [0, d). Slots absent from the result have depth 0.
func jumpDepths(h holderSet, d int, depth map[slotID]int) {
	if d == 0 {
		return
	}
	cur := h.at(0)
	if len(cur) == 0 {
		return
	}
	active := make([]slotID, len(cur))
	copy(active, cur)
	lo, step := 0, JumpStride
	for len(active) > 0 && lo < d-1 {
		hi := lo + step
		if hi > d-1 {
			hi = d - 1
		}
		keep := active[:0]
		for _, s := range active {
			if h.contains(hi, s) {
				keep = append(keep, s)
				continue
			}
			// Binary search the last held position in [lo, hi): held(lo) is known, held(hi) is not.
			l, r := lo, hi
			for r-l > 1 {
				m := (l + r) / 2
				if h.contains(m, s) {
					l = m
				} else {
					r = m
				}
			}
			depth[s] = l + 1
		}
		active = keep
		lo = hi
		step *= 2 // the next window is twice as long: O(log D) windows
	}
	for _, s := range active {
		depth[s] = lo + 1
	}
}

// eventHolders answers holder queries on the event layer for one query.
type eventHolders struct {
	ix   *eventIndex
	seq  []uint64
	live func(slotID) bool
	skip func(slotID) bool // slots matched linearly instead
	buf  []slotID
	// memo of the last looked-up position (lastI −1: none): the jump search asks about one position
	// for every active slot in a row. The index does not change during a query.
	lastI int
	lastE *blockEntry
}

func (e *eventHolders) get(i int) *blockEntry {
	if i != e.lastI {
		e.lastI, e.lastE = i, e.ix.entry(e.seq[i])
	}
	return e.lastE
}

func (e *eventHolders) at(i int) []slotID {
	e.buf = e.buf[:0]
	be := e.get(i)
	if be == nil {
		return e.buf
	}
	add := func(h *holder) {
		if h.tiers != 0 && e.live(h.slot) && !e.skip(h.slot) {
			e.buf = append(e.buf, h.slot)
		}
	}
	n := be.count()
	for j := 0; j < n && j < inlineHolders; j++ {
		add(&be.inline[j])
	}
	if n > inlineHolders {
		over := e.ix.over[e.seq[i]]
		for j := range over {
			add(&over[j])
		}
	}
	return e.buf
}

func (e *eventHolders) contains(i int, s slotID) bool {
	be := e.get(i)
	if be == nil {
		return false
	}
	j := e.ix.findHolder(e.seq[i], be, s)
	return j >= 0 && e.ix.holderAt(e.seq[i], be, j).tiers != 0
}

// softHolders answers holder queries on the soft layer at time now.
type softHolders struct {
	sx   softIndex
	seq  []uint64
	now  int64
	live func(slotID) bool
	buf  []slotID
}

func (e *softHolders) at(i int) []slotID {
	e.buf = e.buf[:0]
	for _, h := range e.sx[e.seq[i]] {
		if h.expiry > e.now && e.live(h.slot) {
			e.buf = append(e.buf, h.slot)
		}
	}
	return e.buf
}

func (e *softHolders) contains(i int, s slotID) bool {
	for _, h := range e.sx[e.seq[i]] {
		if h.slot == s {
			return h.expiry > e.now
		}
	}
	return false
}

// linearDepth walks rank r's prefix from the root: exact for any held set.
func linearDepth(ix *eventIndex, r *rankIndex, seq []uint64) int {
	for i, q := range seq {
		if ix.tiersOf(q, r.slot) == 0 {
			return i
		}
	}
	return len(seq)
}

// tierSplit counts the first depth blocks of seq on rank r by best tier.
func tierSplit(ix *eventIndex, r *rankIndex, seq []uint64, depth int) (dev, host, disk int) {
	if r.nonDevice == 0 {
		return depth, 0, 0
	}
	for _, q := range seq[:depth] {
		switch bestTier(ix.tiersOf(q, r.slot)) {
		case TierDevice:
			dev++
		case TierHost:
			host++
		default:
			disk++
		}
	}
	return
}
