package tokenizer

// bpeModel is a byte-level BPE vocabulary in the form the encoder uses: ids of single bytes, the
// vocabulary keyed by raw bytes, and a pair table. Both input formats reduce to it:
//   - tokenizer.json: pairs come from model.merges, rank = line number (Hugging Face semantics);
//   - tiktoken: every split of a token into two tokens is a pair whose rank is the merged token's
//     rank, which is exactly tiktoken's "merge the adjacent parts whose concatenation has the
//     lowest rank" rule.
//
// It is read-only after construction, so one model serves any number of goroutines.
type bpeModel struct {
	byteIDs [256]uint32
	vocab   map[string]uint32 // raw token bytes → id
	// merges maps left<<32|right to rank<<32|merged id.
	merges map[uint64]uint64
	// ignoreMerges emits a piece that is itself in the vocabulary as one token without merging.
	// tiktoken always does this; tokenizer.json files say so with model.ignore_merges (Llama-3).
	ignoreMerges bool
}

func pairKey(left, right uint32) uint64 { return uint64(left)<<32 | uint64(right) }

// symbol is one part of a piece during merging, linked to its live neighbours; a removed symbol
// has length 0. This mirrors Hugging Face's Word so that even its corner cases (stale queue entries
// accepted when they produce the same id) give the same ids.
type symbol struct {
	id         uint32
	prev, next int32
	length     int32
}

// mergeCand is a queued merge of the symbol at pos with its right neighbour.
type mergeCand struct {
	rank  uint32
	pos   int32
	newID uint32
}

// less orders candidates by rank, then leftmost position, as Hugging Face's merge queue does.
func (a mergeCand) less(b mergeCand) bool {
	if a.rank != b.rank {
		return a.rank < b.rank
	}
	return a.pos < b.pos
}

// bpeScratch holds the per-call buffers of encodePiece (one per concurrent Encode).
type bpeScratch struct {
	syms  []symbol
	queue []mergeCand
}

// encodePiece appends the ids of one pre-tokenised piece (raw bytes) to dst.
func (m *bpeModel) encodePiece(dst []uint32, piece string, sc *bpeScratch) []uint32 {
	switch len(piece) {
	case 0:
		return dst
	case 1:
		return append(dst, m.byteIDs[piece[0]])
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[piece]; ok {
			return append(dst, id)
		}
	}

	syms := sc.syms[:0]
	for i := 0; i < len(piece); i++ {
		syms = append(syms, symbol{id: m.byteIDs[piece[i]], prev: int32(i - 1), next: int32(i + 1), length: 1})
	}
	syms[len(syms)-1].next = -1

	q := sc.queue[:0]
	for i := 0; i+1 < len(syms); i++ {
		if v, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			q = heapPush(q, mergeCand{rank: uint32(v >> 32), pos: int32(i), newID: uint32(v)})
		}
	}
	for len(q) > 0 {
		var top mergeCand
		top, q = heapPop(q)
		cur := &syms[top.pos]
		if cur.length == 0 || cur.next == -1 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		// A queued pair may be stale: accept it only if the pair now there still merges into the
		// same id (Hugging Face's check; the rank is not compared).
		if v, ok := m.merges[pairKey(cur.id, right.id)]; !ok || uint32(v) != top.newID {
			continue
		}
		cur.id = top.newID
		cur.length += right.length
		cur.next = right.next
		syms[nextPos].length = 0
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if v, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				q = heapPush(q, mergeCand{rank: uint32(v >> 32), pos: cur.prev, newID: uint32(v)})
			}
		}
		if cur.next >= 0 {
			if v, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				q = heapPush(q, mergeCand{rank: uint32(v >> 32), pos: top.pos, newID: uint32(v)})
			}
		}
	}
	// Symbol 0 is never removed (only right-hand symbols are), so the chain starts there.
	for i := int32(0); i >= 0; i = syms[i].next {
		dst = append(dst, syms[i].id)
	}
	sc.syms, sc.queue = syms, q
	return dst
}

// heapPush and heapPop keep a binary min-heap of candidates without container/heap's interface
// calls, which dominate for the short pieces typical of prose.
func heapPush(h []mergeCand, c mergeCand) []mergeCand {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []mergeCand) (mergeCand, []mergeCand) {
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	i := 0
	for {
		l := 2*i + 1
		if l >= n {
			break
		}
		s := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			s = r
		}
		if !h[s].less(h[i]) {
			break
		}
		h[i], h[s] = h[s], h[i]
		i = s
	}
	return top, h
}
