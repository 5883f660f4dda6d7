package engine

import (
	"errors"
	"fmt"
)

// Engine is a vLLM-like engine (v1 scheduler) in virtual time: a waiting queue and a running list,
// continuous batching with chunked prefill under a per-step token budget, prefix caching in a
// BlockPool, and recompute preemption when the KV cache cannot grow. See Step for the algorithm and
// Options for the step cost model. Not safe for concurrent use.
type Engine struct {
	opt     Options
	pool    *BlockPool
	waiting deque
	running []*seqState
	byID    map[uint64]*seqState
	freeAt  float64 // end of the last step, ms: the earliest start of the next one

	events    []Event // this step's KV events (the pool's sink appends here)
	scheduled []scheduledSeq
	res       StepResult
}

// New returns an idle engine with an empty KV cache.
func New(opt Options) (*Engine, error) {
	if err := opt.Validate(); err != nil {
		return nil, fmt.Errorf("engine: options: %w", err)
	}
	opt = opt.WithDefaults()
	e := &Engine{opt: opt, byID: make(map[uint64]*seqState)}
	e.pool = NewBlockPool(opt.NumBlocks, opt.Salt, func(ev Event) { e.events = append(e.events, ev) })
	return e, nil
}

// Options returns the engine's options, defaults applied.
func (e *Engine) Options() Options { return e.opt }

// Pool exposes the KV block pool for inspection (Resident, CachedPrefix, counts). Do not acquire or
// release through it.
func (e *Engine) Pool() *BlockPool { return e.pool }

// Submit queues a request that arrived at nowMs. It fails for a duplicate ID, inconsistent hashes, or
// a request whose whole sequence could never fit in the KV cache (vLLM rejects those too).
func (e *Engine) Submit(req Request, nowMs float64) error {
	bs := e.opt.BlockSize
	switch {
	case req.InputTokens < 1:
		return fmt.Errorf("engine: submit %d: input tokens %d < 1", req.ID, req.InputTokens)
	case req.OutputTokens < 0:
		return fmt.Errorf("engine: submit %d: output tokens %d < 0", req.ID, req.OutputTokens)
	case len(req.SeqHashes) != len(req.LocalHashes):
		return fmt.Errorf("engine: submit %d: %d sequence hashes but %d local hashes", req.ID, len(req.SeqHashes), len(req.LocalHashes))
	case len(req.SeqHashes) > req.InputTokens/bs:
		return fmt.Errorf("engine: submit %d: %d block hashes for %d tokens at block size %d", req.ID, len(req.SeqHashes), req.InputTokens, bs)
	}
	if _, dup := e.byID[req.ID]; dup {
		return fmt.Errorf("engine: submit %d: duplicate request id", req.ID)
	}
	out := max(req.OutputTokens, 1)
	// The last sampled token is never fed back, so the KV peaks at input + output − 1 tokens.
	if need := (req.InputTokens + out - 1 + bs - 1) / bs; need > e.opt.NumBlocks {
		return fmt.Errorf("engine: submit %d: %w (needs %d blocks, capacity %d)", req.ID, ErrTooLong, need, e.opt.NumBlocks)
	}
	if e.idle() {
		e.freeAt = max(e.freeAt, nowMs)
	}
	s := &seqState{req: req, output: out}
	e.byID[req.ID] = s
	e.waiting.pushBack(s)
	return nil
}

// ErrTooLong: the request's sequence can never fit in the engine's KV cache.
var ErrTooLong = errors.New("sequence longer than the KV cache")

// NextEventTime is when the next Step should run (ms): the end of the current step, or the arrival
// of work on an idle engine. ok is false when there is no work at all.
func (e *Engine) NextEventTime() (ms float64, ok bool) {
	if e.idle() {
		return 0, false
	}
	return e.freeAt, true
}

// Active reports the running and waiting requests and the prompt tokens still to compute: the rest of
// every running prefill (or recompute) plus every waiting request's whole sequence (its cache hits are
// only known at admission).
func (e *Engine) Active() (runningRequests, waitingRequests int, prefillTokensQueued int) {
	for _, s := range e.running {
		if rest := s.numTokens() - s.computed; !s.decoding() {
			prefillTokensQueued += rest
		}
	}
	for i := e.waiting.head; i < len(e.waiting.items); i++ {
		s := e.waiting.items[i]
		prefillTokensQueued += s.numTokens() - s.computed
	}
	return len(e.running), e.waiting.len(), prefillTokensQueued
}

// KVUsage is the fraction of KV blocks in use (referenced or private), vLLM's kv_cache_usage.
func (e *Engine) KVUsage() float64 {
	return float64(e.pool.Used()) / float64(e.pool.Capacity())
}

func (e *Engine) idle() bool { return len(e.running) == 0 && e.waiting.len() == 0 }

// decoding reports whether the request's next step is a decode: one sampled token left to feed back.
func (s *seqState) decoding() bool { return s.generated > 0 && s.computed == s.numTokens()-1 }

// deque is a FIFO that also takes preempted requests back at its front.
type deque struct {
	items []*seqState
	head  int
}

func (d *deque) len() int { return len(d.items) - d.head }

func (d *deque) front() *seqState { return d.items[d.head] }

func (d *deque) pushBack(s *seqState) { d.items = append(d.items, s) }

func (d *deque) pushFront(s *seqState) {
	if d.head > 0 {
		d.head--
		d.items[d.head] = s
		return
	}
	d.items = append(d.items, nil)
	copy(d.items[1:], d.items)
	d.items[0] = s
}

func (d *deque) popFront() *seqState {
	s := d.items[d.head]
	d.items[d.head] = nil
	d.head++
	if d.head == len(d.items) {
		d.items, d.head = d.items[:0], 0
	} else if d.head > 1024 && d.head > len(d.items)/2 {
		n := copy(d.items, d.items[d.head:])
		clear(d.items[n:])
		d.items, d.head = d.items[:n], 0
	}
	return s
}
