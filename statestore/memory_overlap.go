package statestore

// Overlap lookup over the embedded index: a jump search (SPEC §5). The matched depth of every rank is
// found by probing the end of windows of growing length (JumpStride, then doubling: positions 32, 96,
// 224, 480, …) and binary-searching back only for the ranks that stop matching inside a window, so a
// query costs O(log D + W·log D) lookups on prefix-closed data (a fixed stride J costs O(D/J): 64 window
// probes for a 2,048-block prompt instead of 7). On prefix-closed data any probe order brackets the same
// boundary, so the depth does not depend on the windows. Ranks whose held set is not prefix-closed
// (orphans > 0) are walked linearly instead, so the result is always exact. The same algorithm (same
// windows, same binary search) runs in route.lua.

// holderSet answers the jump search's questions about one query's positions.
type holderSet interface {
	// contains reports whether live slot s holds the block at query position i.
	contains(i int, s slotID) bool
	// at returns the live slots holding the block at position i.
	at(i int) []slotID
}

// slotDepth is one slot's matched prefix depth.
type slotDepth struct {
	slot  slotID
	depth int
}

// jumpDepths appends to out the matched prefix depth (> 0) of every slot found by the jump search over
// positions [0, d), in the order the search settles them; slots it does not append have depth 0.
// js holds its working slices between calls.
func jumpDepths(h holderSet, d int, out []slotDepth, js *jumpScratch) []slotDepth {
	if d == 0 {
		return out
	}
	cur := h.at(0)
	if len(cur) == 0 {
		return out
	}
	active, dropped := append(js.active[:0], cur...), js.dropped[:0]
	defer func() { js.active, js.dropped = active[:0], dropped[:0] }()
	lo, step := 0, JumpStride
	for len(active) > 0 && lo < d-1 {
		hi := lo + step
		if hi > d-1 {
			hi = d - 1
		}
		keep, drop := active[:0], dropped[:0]
		for _, s := range active {
			if h.contains(hi, s) {
				keep = append(keep, s)
			} else {
				drop = append(drop, s)
			}
		}
		out = settle(h, lo, hi, drop, out)
		active, dropped = keep, drop
		lo = hi
		step *= 2 // the next window is twice as long: O(log D) windows
	}
	for _, s := range active {
		out = append(out, slotDepth{s, lo + 1})
	}
	return out
}

// settle binary-searches the last held position in [lo, hi) of every slot in group, all of which hold
// lo and not hi, and appends their depths to out. The group is searched together: at each midpoint it
// splits into the slots that hold it (searched on in the upper half) and the others (lower half), so
// every position is probed once per group rather than once per slot (ranks that stop matching in the
// same window share their first midpoints). Each slot's path is exactly its own binary search's: the
// same midpoints, taken on its own answers.
func settle(h holderSet, lo, hi int, group []slotID, out []slotDepth) []slotDepth {
	for len(group) > 0 {
		if hi-lo <= 1 {
			for _, s := range group {
				out = append(out, slotDepth{s, lo + 1})
			}
			return out
		}
		m := (lo + hi) / 2
		// Partition in place: holders of m first.
		k := 0
		for i, s := range group {
			if h.contains(m, s) {
				group[i], group[k] = group[k], s
				k++
			}
		}
		if k < len(group) {
			out = settle(h, lo, m, group[k:], out)
		}
		group, lo = group[:k], m
	}
	return out
}

// jumpScratch is jumpDepths' working memory: the slots still matching, and those that stopped in the
// current window.
type jumpScratch struct{ active, dropped []slotID }

// eventHolders answers holder queries on the event layer for one query.
type eventHolders struct {
	p   *memPool
	seq []uint64
	buf []slotID
	// The last looked-up position (lastI −1: none), its entry and its overflow holders: the jump search
	// asks about one position for every active slot in a row, so the entry's probe and the overflow
	// map's access are paid once per position, not once per slot (on a system prompt held by every
	// worker, the overflow map access per slot was the lookup's largest cost). The index does not
	// change during a query.
	lastI    int
	lastE    *blockEntry
	lastOver []holder
}

func (e *eventHolders) get(i int) *blockEntry {
	if i != e.lastI {
		ix := e.p.events
		e.lastI, e.lastE, e.lastOver = i, ix.entry(e.seq[i]), nil
		if e.lastE != nil && e.lastE.count() > inlineHolders {
			e.lastOver = ix.over[e.seq[i]]
		}
	}
	return e.lastE
}

func (e *eventHolders) at(i int) []slotID {
	e.buf = e.buf[:0]
	be := e.get(i)
	if be == nil {
		return e.buf
	}
	for j := 0; j < be.count() && j < inlineHolders; j++ {
		if h := &be.inline[j]; h.tiers != 0 && e.searched(h.slot) {
			e.buf = append(e.buf, h.slot)
		}
	}
	for j := range e.lastOver {
		if h := &e.lastOver[j]; h.tiers != 0 && e.searched(h.slot) {
			e.buf = append(e.buf, h.slot)
		}
	}
	return e.buf
}

// searched reports whether slot s is live and matched by the jump search (ranks with orphans are
// walked linearly instead).
func (e *eventHolders) searched(s slotID) bool {
	r := e.p.slots[s]
	return r != nil && r.idx.orphans == 0
}

func (e *eventHolders) contains(i int, s slotID) bool {
	be := e.get(i)
	if be == nil {
		return false
	}
	for j := 0; j < be.count() && j < inlineHolders; j++ {
		if be.inline[j].slot == s {
			return be.inline[j].tiers != 0
		}
	}
	for j := range e.lastOver {
		if e.lastOver[j].slot == s {
			return e.lastOver[j].tiers != 0
		}
	}
	return false
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
