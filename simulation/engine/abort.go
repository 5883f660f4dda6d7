package engine

import "slices"

// Abort removes an unfinished request, waiting or running, as vLLM does when its client goes away: its
// blocks are released (the full prompt blocks it computed stay cached until evicted, so no event) and it
// is never reported again. Call it between steps. False: no such unfinished request.
func (e *Engine) Abort(id uint64) bool {
	s := e.byID[id]
	if s == nil {
		return false
	}
	delete(e.byID, id)
	if i := slices.Index(e.running, s); i >= 0 {
		e.freeBlocks(s)
		e.running = slices.Delete(e.running, i, i+1)
		return true
	}
	e.waiting.remove(s) // new or preempted: a waiting request holds no blocks
	return true
}

// Generated reports how many tokens an unfinished request has sampled so far (0 before its first token;
// a preemption keeps them, only their KV is recomputed). False: no such unfinished request (finished,
// aborted or unknown).
func (e *Engine) Generated(id uint64) (int, bool) {
	s := e.byID[id]
	if s == nil {
		return 0, false
	}
	return s.generated, true
}

// remove deletes s from the queue, keeping the others' order.
func (d *deque) remove(s *seqState) {
	i := slices.Index(d.items[d.head:], s)
	if i < 0 {
		return
	}
	d.items = slices.Delete(d.items, d.head+i, d.head+i+1)
	if d.head == len(d.items) {
		d.items, d.head = d.items[:0], 0
	}
}
