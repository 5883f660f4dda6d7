package statestore

// The memory store's load order (issue 15), kept up to date on every change of a rank's load (booking,
// prefill done, release, expiry), on registration and removal, and when the pool's knobs change:
//
//   - load groups: the ranks with exactly the same load (prefill tokens, decode blocks, requests) form
//     one group — a rank holding none of a prompt costs a function of its load alone, so a group's
//     members all cost the same. Each group keeps its members in candidate order in a treap with subtree
//     sizes, so the j-th member and a member's position cost O(log g), and an idle pool of 4,096 ranks
//     is one group, not 4,096 costs to compare.
//   - byKey orders the groups by their load score (loadKey); memory_select.go reads it from the head.
//   - byPrefill orders the ranks by active_prefill_tokens, an integer, so the minimum over the eligible
//     ranks (the credit decay's reference) is read exactly from its head.
//
// Both heaps are read in ascending order lazily through a frontier of heap positions (orderedWalk):
// reading the k smallest entries costs O(k log k), whatever the pool's size. An update costs O(log n).

// loadKey is a load's score under the pool's knobs: prefill_load_scale · prefill / block_size +
// decode_blocks + decode_active_request_weight · requests. A rank holding none of a prompt costs this plus
// a term the same for every rank (memory_select.go proves how far rounding can move the order).
func loadKey(cfg *PoolConfig, l Load) float64 {
	return cfg.PrefillLoadScale*(float64(l.PrefillTokens)/float64(cfg.BlockSize)) + float64(l.DecodeBlocks) +
		cfg.DecodeActiveRequestWeight*float64(l.Requests)
}

// loadGroup is the set of ranks with one exact load.
type loadGroup struct {
	load Load
	key  float64  // loadKey(cfg, load)
	root *memRank // treap of the members in candidate order
	hpos int32    // position in byKey
}

// orderHeap is an indexed binary min-heap; pos gives each element's position field (-1: absent).
type orderHeap[T any] struct {
	a    []T
	less func(x, y T) bool
	pos  func(x T) *int32
}

func (h *orderHeap[T]) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	*h.pos(h.a[i]) = int32(i)
	*h.pos(h.a[j]) = int32(j)
}

func (h *orderHeap[T]) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.a[i], h.a[p]) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h *orderHeap[T]) down(i int) {
	n := len(h.a)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && h.less(h.a[c+1], h.a[c]) {
			c++
		}
		if !h.less(h.a[c], h.a[i]) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

func (h *orderHeap[T]) push(x T) {
	*h.pos(x) = int32(len(h.a))
	h.a = append(h.a, x)
	h.up(len(h.a) - 1)
}

// remove takes x out of the heap (no-op when absent).
func (h *orderHeap[T]) remove(x T) {
	i := int(*h.pos(x))
	if i < 0 {
		return
	}
	last := len(h.a) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.a[last] = zero
	h.a = h.a[:last]
	*h.pos(x) = -1
	if i != last {
		h.down(i)
		h.up(i)
	}
}

// fix restores the order after x's value changed (no-op when absent).
func (h *orderHeap[T]) fix(x T) {
	if i := int(*h.pos(x)); i >= 0 {
		h.down(i)
		h.up(i)
	}
}

// heapify re-establishes the order of every entry (after the values of many changed).
func (h *orderHeap[T]) heapify() {
	for i := len(h.a)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

// orderedWalk visits the heap's entries in ascending order until visit returns false. frontier is
// scratch space (returned for reuse): the positions whose parents were visited, itself a min-heap.
func (h *orderHeap[T]) orderedWalk(frontier []int32, visit func(x T) bool) []int32 {
	frontier = frontier[:0]
	if len(h.a) == 0 {
		return frontier
	}
	less := func(i, j int) bool { return h.less(h.a[frontier[i]], h.a[frontier[j]]) }
	frontier = append(frontier, 0)
	for len(frontier) > 0 {
		i := int(frontier[0])
		last := len(frontier) - 1
		frontier[0] = frontier[last]
		frontier = frontier[:last]
		for j := 0; ; { // sift the new top down
			c := 2*j + 1
			if c >= len(frontier) {
				break
			}
			if c+1 < len(frontier) && less(c+1, c) {
				c++
			}
			if !less(c, j) {
				break
			}
			frontier[j], frontier[c] = frontier[c], frontier[j]
			j = c
		}
		if !visit(h.a[i]) {
			return frontier
		}
		for c := 2*i + 1; c <= 2*i+2 && c < len(h.a); c++ {
			frontier = append(frontier, int32(c))
			for j := len(frontier) - 1; j > 0; { // sift up
				p := (j - 1) / 2
				if !less(j, p) {
					break
				}
				frontier[j], frontier[p] = frontier[p], frontier[j]
				j = p
			}
		}
	}
	return frontier
}

func newLoadOrder(p *memPool) {
	p.groups = map[Load]*loadGroup{}
	p.byKey = orderHeap[*loadGroup]{less: func(x, y *loadGroup) bool { return x.key < y.key },
		pos: func(g *loadGroup) *int32 { return &g.hpos }}
	p.byPrefill = orderHeap[*memRank]{less: func(x, y *memRank) bool { return x.load.PrefillTokens < y.load.PrefillTokens },
		pos: func(r *memRank) *int32 { return &r.ppos }}
	p.bySeen = orderHeap[*memWorker]{less: func(x, y *memWorker) bool { return x.seenKey < y.seenKey },
		pos: func(w *memWorker) *int32 { return &w.seenPos }}
}

// deadWorkers calls f on every worker not live at now under worker_ttl_ms (> 0): they are among the
// prefix of bySeen with seenKey + ttl ≤ now. A worker there that is live after all (an event moved its
// lastSeen on) gets its key caught up afterwards, once per such move, so the walk costs O(dead + caught
// up) amortised.
func (p *memPool) deadWorkers(now int64, f func(w *memWorker)) {
	ttl := p.cfg.WorkerTTLMs
	var stale []*memWorker
	p.seenBuf = p.bySeen.orderedWalk(p.seenBuf, func(w *memWorker) bool {
		if w.seenKey+ttl > now {
			return false
		}
		if p.live(w, now) {
			stale = append(stale, w)
		} else {
			f(w)
		}
		return true
	})
	for _, w := range stale {
		w.seenKey = w.lastSeen
		p.bySeen.fix(w)
	}
}

// joinGroup adds r to the group of its load (creating it).
func (p *memPool) joinGroup(r *memRank) {
	g := p.groups[r.load]
	if g == nil {
		g = &loadGroup{load: r.load, key: loadKey(&p.cfg, r.load), hpos: -1}
		p.groups[r.load] = g
		p.byKey.push(g)
	}
	p.prio = p.prio*6364136223846793005 + 1442695040888963407
	r.tprio, r.tl, r.tr, r.tsize = uint32(p.prio>>32), nil, nil, 1
	g.root = treapInsert(g.root, r)
	r.group = g
}

// leaveGroup takes r out of its group (dropping the group when empty).
func (p *memPool) leaveGroup(r *memRank) {
	g := r.group
	if g == nil {
		return
	}
	g.root = treapDelete(g.root, r)
	r.group = nil
	if g.root == nil {
		delete(p.groups, g.load)
		p.byKey.remove(g)
	}
}

// addRank puts a newly registered rank into the load order.
func (p *memPool) addRank(r *memRank) {
	r.ppos = -1
	p.joinGroup(r)
	p.byPrefill.push(r)
}

// dropRank takes a detached rank out of the load order.
func (p *memPool) dropRank(r *memRank) {
	p.leaveGroup(r)
	p.byPrefill.remove(r)
}

// loadChanged moves r to the group of its new load (a detached rank, released late, is in none).
func (p *memPool) loadChanged(r *memRank) {
	if r.group == nil || r.group.load == r.load {
		return
	}
	p.leaveGroup(r)
	p.joinGroup(r)
	p.byPrefill.fix(r)
}

// rekey recomputes every group's load score after the pool's knobs changed.
func (p *memPool) rekey() {
	for _, g := range p.byKey.a {
		g.key = loadKey(&p.cfg, g.load)
	}
	p.byKey.heapify()
}

// A treap of ranks in candidate order (rankLess), heap-ordered by tprio, with subtree sizes.

func treapSize(t *memRank) int32 {
	if t == nil {
		return 0
	}
	return t.tsize
}

func treapFix(t *memRank) { t.tsize = 1 + treapSize(t.tl) + treapSize(t.tr) }

// treapSplit splits t into the ranks before r and the rest.
func treapSplit(t, r *memRank) (lo, hi *memRank) {
	if t == nil {
		return nil, nil
	}
	if rankLess(t, r) {
		t.tr, hi = treapSplit(t.tr, r)
		treapFix(t)
		return t, hi
	}
	lo, t.tl = treapSplit(t.tl, r)
	treapFix(t)
	return lo, t
}

// treapMerge joins a and b, every rank of a before every rank of b.
func treapMerge(a, b *memRank) *memRank {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case a.tprio > b.tprio:
		a.tr = treapMerge(a.tr, b)
		treapFix(a)
		return a
	}
	b.tl = treapMerge(a, b.tl)
	treapFix(b)
	return b
}

func treapInsert(t, r *memRank) *memRank {
	lo, hi := treapSplit(t, r)
	return treapMerge(treapMerge(lo, r), hi)
}

func treapDelete(t, r *memRank) *memRank {
	switch {
	case t == nil:
		return nil
	case t == r:
		return treapMerge(t.tl, t.tr)
	case rankLess(r, t):
		t.tl = treapDelete(t.tl, r)
	default:
		t.tr = treapDelete(t.tr, r)
	}
	treapFix(t)
	return t
}

// treapAt returns the j-th rank (from 0) of t in candidate order.
func treapAt(t *memRank, j int32) *memRank {
	for t != nil {
		l := treapSize(t.tl)
		switch {
		case j < l:
			t = t.tl
		case j == l:
			return t
		default:
			j -= l + 1
			t = t.tr
		}
	}
	return nil
}

// treapLess counts the ranks of t before x in candidate order (x need not be a member).
func treapLess(t, x *memRank) int32 {
	var n int32
	for t != nil {
		if rankLess(t, x) {
			n += treapSize(t.tl) + 1
			t = t.tr
		} else {
			t = t.tl
		}
	}
	return n
}

// treapEach calls f on every rank of t in candidate order.
func treapEach(t *memRank, f func(r *memRank)) {
	if t == nil {
		return
	}
	treapEach(t.tl, f)
	f(t)
	treapEach(t.tr, f)
}
