package statestore

// The memory store keeps every registered rank in two indexed binary min-heaps, updated on every
// change of its load (booking, prefill done, release, expiry), on registration and removal, and when
// the pool's knobs change:
//
//   - byKey orders ranks by their load score (loadKey): what the cost of a rank holding none of the
//     prompt depends on (memory_select.go reads its head to find the cheapest such rank);
//   - byPrefill orders ranks by active_prefill_tokens, an integer, so the minimum over the eligible
//     ranks (the credit decay's reference) is read exactly from its head.
//
// Both are read in ascending order, lazily, through a frontier of heap positions (orderedWalk): reading
// the k smallest entries costs O(k log k), whatever the pool's size. An update costs O(log n).

const (
	heapByKey     = 0
	heapByPrefill = 1
)

// loadKey is a rank's load score under the pool's knobs: prefill_load_scale · prefill / block_size +
// decode_blocks + decode_active_request_weight · requests. A rank holding none of a prompt costs this plus
// a term the same for every rank (memory_select.go proves how far rounding can move the order).
func loadKey(cfg *PoolConfig, l Load) float64 {
	return cfg.PrefillLoadScale*(float64(l.PrefillTokens)/float64(cfg.BlockSize)) + float64(l.DecodeBlocks) +
		cfg.DecodeActiveRequestWeight*float64(l.Requests)
}

// rankHeap is an indexed binary min-heap of ranks; rank.hpos[which] is each rank's position (-1: absent).
type rankHeap struct {
	which int // heapByKey or heapByPrefill
	a     []*memRank
}

func (h *rankHeap) less(i, j int) bool {
	a, b := h.a[i], h.a[j]
	if h.which == heapByKey {
		return a.loadKey < b.loadKey
	}
	return a.load.PrefillTokens < b.load.PrefillTokens
}

func (h *rankHeap) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	h.a[i].hpos[h.which] = int32(i)
	h.a[j].hpos[h.which] = int32(j)
}

func (h *rankHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *rankHeap) down(i int) {
	n := len(h.a)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *rankHeap) push(r *memRank) {
	r.hpos[h.which] = int32(len(h.a))
	h.a = append(h.a, r)
	h.up(len(h.a) - 1)
}

// remove takes r out of the heap (no-op when absent).
func (h *rankHeap) remove(r *memRank) {
	i := int(r.hpos[h.which])
	if i < 0 {
		return
	}
	last := len(h.a) - 1
	if i != last {
		h.swap(i, last)
	}
	h.a[last] = nil
	h.a = h.a[:last]
	r.hpos[h.which] = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// fix restores the order after r's value changed (no-op when absent).
func (h *rankHeap) fix(r *memRank) {
	if i := int(r.hpos[h.which]); i >= 0 {
		h.down(i)
		h.up(i)
	}
}

// heapify re-establishes the order of every entry (after the values of many changed).
func (h *rankHeap) heapify() {
	for i := len(h.a)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// orderedWalk visits the heap's ranks in ascending order until visit returns false. frontier is scratch
// space (returned for reuse): the positions whose parents were visited, itself a min-heap.
func (h *rankHeap) orderedWalk(frontier []int32, visit func(r *memRank) bool) []int32 {
	frontier = frontier[:0]
	if len(h.a) == 0 {
		return frontier
	}
	frontier = append(frontier, 0)
	for len(frontier) > 0 {
		i := int(frontier[0])
		// pop the frontier's minimum
		last := len(frontier) - 1
		frontier[0] = frontier[last]
		frontier = frontier[:last]
		frontierDown(h, frontier, 0)
		if !visit(h.a[i]) {
			return frontier
		}
		for c := 2*i + 1; c <= 2*i+2 && c < len(h.a); c++ {
			frontier = append(frontier, int32(c))
			frontierUp(h, frontier, len(frontier)-1)
		}
	}
	return frontier
}

func frontierUp(h *rankHeap, f []int32, i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(int(f[i]), int(f[p])) {
			return
		}
		f[i], f[p] = f[p], f[i]
		i = p
	}
}

func frontierDown(h *rankHeap, f []int32, i int) {
	n := len(f)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(int(f[c+1]), int(f[c])) {
			c++
		}
		if !h.less(int(f[c]), int(f[i])) {
			return
		}
		f[i], f[c] = f[c], f[i]
		i = c
	}
}

// addRank puts a newly registered rank into the load order.
func (p *memPool) addRank(r *memRank) {
	r.hpos = [2]int32{-1, -1}
	r.loadKey = loadKey(&p.cfg, r.load)
	p.byKey.push(r)
	p.byPrefill.push(r)
}

// dropRank takes a detached rank out of the load order.
func (p *memPool) dropRank(r *memRank) {
	p.byKey.remove(r)
	p.byPrefill.remove(r)
}

// loadChanged re-sorts r after its load changed (a detached rank, released late, is in no heap).
func (p *memPool) loadChanged(r *memRank) {
	if r.hpos[heapByKey] < 0 {
		return
	}
	r.loadKey = loadKey(&p.cfg, r.load)
	p.byKey.fix(r)
	p.byPrefill.fix(r)
}

// rekey recomputes every load score after the pool's knobs changed.
func (p *memPool) rekey() {
	for _, r := range p.byKey.a {
		r.loadKey = loadKey(&p.cfg, r.load)
	}
	p.byKey.heapify()
}
