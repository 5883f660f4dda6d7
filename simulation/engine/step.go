package engine

// StepResult reports one scheduler step. Its slices are reused by the next Step: copy what you keep
// (the Events themselves own their slices and may be kept).
type StepResult struct {
	// StartMs and EndMs bound the step in virtual time; EndMs − StartMs is the cost model's duration.
	// A step that scheduled nothing has StartMs == EndMs and no effect.
	StartMs, EndMs float64
	// PrefillTokens, DecodeSeqs and ContextTokens are the cost model's inputs (see Options).
	PrefillTokens, DecodeSeqs, ContextTokens int
	// Admitted lists the requests moved from waiting to running, with their prefix cache hits.
	Admitted []Admission
	// FirstTokens lists requests whose first token was sampled in this step (TimeMs = EndMs).
	FirstTokens []RequestTime
	// Finished lists requests that sampled their last token in this step (TimeMs = EndMs); their
	// blocks are released (they stay cached until evicted).
	Finished []RequestTime
	// Preempted lists requests sent back to the waiting queue, their blocks released (recompute).
	Preempted []uint64
	// Events are the KV events of the step, in order. They happen while the step is scheduled; vLLM
	// publishes them when the step's output is processed, i.e. at about EndMs.
	Events []Event
}

// Admission is a request admitted to the running list.
type Admission struct {
	ID uint64
	// CachedTokens is the prefix cache hit, tokens (whole blocks, capped below the sequence length
	// so that at least one token is computed, as in vLLM).
	CachedTokens int
	// Resumed is true when the request was preempted before (it recomputes its generated tokens too).
	Resumed bool
}

// RequestTime is an event of one request at a virtual time, ms.
type RequestTime struct {
	ID     uint64
	TimeMs float64
}

// scheduledSeq is one request's share of a step.
type scheduledSeq struct {
	s        *seqState
	newTok   int // tokens computed this step
	computed int // tokens in KV before the step
}

// Step runs one scheduler step starting at max(nowMs, end of the previous step) and returns what
// happened by its end. Call it at NextEventTime.
//
// Algorithm (vLLM v1's Scheduler.schedule, without speculative decoding or priorities):
//  1. Running requests, oldest first, each take min(remaining tokens, budget) tokens from the
//     MaxNumBatchedTokens budget: 1 for a decode, a chunk for a prefill (chunked prefill). Their KV
//     grows to ceil(tokens / BlockSize) blocks; full prompt blocks are cached (Stored events). If the
//     pool cannot grow, the newest running request is preempted — its blocks released, its progress
//     dropped, put back at the front of the waiting queue — until the request fits or is itself
//     preempted (then the pass stops).
//  2. If nothing was preempted, waiting requests are admitted in FIFO order while the budget and
//     MaxNumSeqs allow: the cached prefix is a hit, the next chunk is allocated; the first that does
//     not fit stops admission (head-of-line, as vLLM).
//  3. The step lasts Options.StepMs(prefill tokens, decode requests, context tokens). At its end every
//     request whose tokens are all computed samples one token: the first one is reported in
//     FirstTokens, the last one in Finished (its blocks released).
func (e *Engine) Step(nowMs float64) StepResult {
	e.res = StepResult{
		Admitted:    e.res.Admitted[:0],
		FirstTokens: e.res.FirstTokens[:0],
		Finished:    e.res.Finished[:0],
		Preempted:   e.res.Preempted[:0],
	}
	e.events = e.events[:0]
	e.scheduled = e.scheduled[:0]
	start := max(nowMs, e.freeAt)
	budget := e.opt.MaxNumBatchedTokens

	// 1. Running requests.
	for i := 0; i < len(e.running) && budget > 0; i++ {
		s := e.running[i]
		n := min(s.numTokens()-s.computed, budget)
		for !e.grow(s, n) {
			victim := e.running[len(e.running)-1]
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			if victim == s {
				n = 0
				break
			}
		}
		if n == 0 {
			break
		}
		e.scheduled = append(e.scheduled, scheduledSeq{s: s, newTok: n, computed: s.computed})
		budget -= n
	}

	// 2. Waiting requests, unless this step preempted (vLLM does not admit then).
	for len(e.res.Preempted) == 0 && budget > 0 && e.waiting.len() > 0 && len(e.running) < e.opt.MaxNumSeqs {
		s := e.waiting.front()
		bs := e.opt.BlockSize
		hits := min(e.pool.CachedPrefix(s.req.SeqHashes), (s.numTokens()-1)/bs)
		s.computed = hits * bs
		n := min(s.numTokens()-s.computed, budget)
		if !e.grow(s, n) {
			s.computed = 0
			break
		}
		e.waiting.popFront()
		e.running = append(e.running, s)
		e.res.Admitted = append(e.res.Admitted, Admission{ID: s.req.ID, CachedTokens: s.computed, Resumed: s.started})
		s.started = true
		e.scheduled = append(e.scheduled, scheduledSeq{s: s, newTok: n, computed: s.computed})
		budget -= n
	}

	e.res.StartMs, e.res.EndMs = start, start
	e.res.Events = e.events
	if len(e.scheduled) == 0 {
		return e.res
	}

	// 3. Cost, then the step's outputs.
	for _, sc := range e.scheduled {
		e.res.ContextTokens += sc.computed
		if sc.s.decoding() {
			e.res.DecodeSeqs++
		} else {
			e.res.PrefillTokens += sc.newTok
		}
	}
	end := start + e.opt.StepMs(e.res.PrefillTokens, e.res.DecodeSeqs, e.res.ContextTokens)
	e.res.EndMs = end
	e.freeAt = end
	finished := false
	for _, sc := range e.scheduled {
		s := sc.s
		s.computed += sc.newTok
		if s.computed < s.numTokens() {
			continue // a prefill chunk that is not the last
		}
		s.generated++
		if s.generated == 1 {
			e.res.FirstTokens = append(e.res.FirstTokens, RequestTime{ID: s.req.ID, TimeMs: end})
		}
		if s.generated >= s.output {
			e.res.Finished = append(e.res.Finished, RequestTime{ID: s.req.ID, TimeMs: end})
			e.freeBlocks(s)
			delete(e.byID, s.req.ID)
			s.output = -1 // marks it for removal from running
			finished = true
		}
	}
	if finished {
		e.running = deleteMarked(e.running)
	}
	e.res.Events = e.events
	return e.res
}

// grow makes s hold the blocks for computed+n tokens: full prompt blocks cached (hashed), the partial
// last block and blocks of generated tokens private. False: the pool is full, nothing changed.
func (e *Engine) grow(s *seqState, n int) bool {
	bs := e.opt.BlockSize
	t := s.computed + n
	blocks := (t + bs - 1) / bs
	hashed := min(len(s.req.SeqHashes), t/bs)
	private := blocks - hashed
	if _, ok := e.pool.extend(s.hashed, s.req.SeqHashes[:hashed], s.req.LocalHashes[:hashed], private-s.private, &s.slots); !ok {
		return false
	}
	s.hashed, s.private = hashed, private
	return true
}

// preempt releases s's blocks, drops its progress and puts it at the front of the waiting queue
// (vLLM's recompute preemption: on resumption it prefills prompt and generated tokens again).
func (e *Engine) preempt(s *seqState) {
	e.freeBlocks(s)
	s.computed = 0
	e.waiting.pushFront(s)
	e.res.Preempted = append(e.res.Preempted, s.req.ID)
}

func (e *Engine) freeBlocks(s *seqState) {
	e.pool.releaseSlots(s.slots)
	s.slots = s.slots[:0]
	e.pool.FreePrivate(s.private)
	s.hashed, s.private = 0, 0
}

// deleteMarked removes finished requests (output < 0) from running, keeping the order.
func deleteMarked(running []*seqState) []*seqState {
	out := running[:0]
	for _, s := range running {
		if s.output >= 0 {
			out = append(out, s)
		}
	}
	clear(running[len(out):])
	return out
}
