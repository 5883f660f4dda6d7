package statestore

import (
	"context"

	"github.com/kvrouter/kvrouter/blockhash"
)

// ApplyEvents implements Store: one worker's events, in order, each fenced per (worker, dp_rank) by
// epoch and event id (SPEC §4.1).
func (m *Memory) ApplyEvents(_ context.Context, b EventBatch) (ApplyResult, error) {
	var res ApplyResult
	if err := ValidateBatch(&b); err != nil {
		return res, err
	}
	p, err := m.pool(b.Pool)
	if err != nil {
		return res, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[b.WorkerID]
	if w == nil {
		res.UnknownWorker = len(b.Events)
		return res, nil
	}
	if b.NowMs > w.lastSeen {
		w.lastSeen = b.NowMs
	}
	for i := range b.Events {
		p.applyOne(w, &b.Events[i], &res)
	}
	p.reclaim(b.NowMs)
	return res, nil
}

// fence decides whether ev is applied on rank r, updating the rank's epoch and last event id.
func (p *memPool) fence(r *memRank, ev *Event, res *ApplyResult) bool {
	if ev.Epoch != "" && r.epoch != ev.Epoch {
		if r.epoch != "" { // a new engine process: its old cache is gone
			p.clearRank(r)
			r.hasEvent, r.lastEventID, r.degraded = false, 0, false
			res.Restarts++
		}
		r.epoch = ev.Epoch
	}
	if !ev.HasEventID {
		return true
	}
	if r.hasEvent && ev.EventID > r.lastEventID && ev.EventID-r.lastEventID > p.limits.maxEventIDJump() {
		// Far ahead of the last id: an engine restart (or a bogus id), not billions of lost events;
		// otherwise every later event of the epoch would be stale (issue 11, defect 7).
		p.clearRank(r)
		r.hasEvent, r.lastEventID, r.degraded = false, 0, false
		res.Restarts++
	}
	if r.hasEvent && ev.EventID <= r.lastEventID {
		res.Stale++
		return false
	}
	if r.hasEvent && ev.EventID > r.lastEventID+1 {
		res.Gaps++
		r.degraded = true
	}
	r.lastEventID, r.hasEvent = ev.EventID, true
	return true
}

func (p *memPool) applyOne(w *memWorker, ev *Event, res *ApplyResult) {
	if ev.DPRank < 0 || ev.DPRank >= len(w.ranks) {
		res.UnknownWorker++
		return
	}
	r := w.ranks[ev.DPRank]
	if !p.fence(r, ev, res) {
		return
	}
	if ev.BlockSize > 0 && ev.BlockSize != p.cfg.BlockSize {
		res.BlockSizeMismatch++
		return
	}
	switch ev.Kind {
	case EventStored:
		var root uint64 // the sequence hash the chain continues (when ev.HasParent)
		if ev.HasParent {
			seq, ok := r.idx.byEngine.Get(ev.Parent)
			if !ok {
				res.ParentNotFound++
				return
			}
			root = seq
		}
		parent, hasParent := root, ev.HasParent
		seqs, engines := p.seqBuf[:0], p.engineBuf[:0]
		for _, blk := range ev.Blocks {
			seq := blk.LocalHash
			if hasParent {
				seq = blockhash.Next(parent, blk.LocalHash)
			}
			seqs, engines = append(seqs, seq), append(engines, blk.EngineHash)
			parent, hasParent = seq, true
		}
		p.seqBuf, p.engineBuf = seqs, engines
		parent, hasParent = root, ev.HasParent
		parentAt := -1 // the parent's event-table slot, when known
		for lo := 0; lo < len(seqs); lo += prefetchChunk {
			hi := min(lo+prefetchChunk, len(seqs))
			p.prefetch(r, seqs[lo:hi], engines[lo:hi])
			for i := lo; i < hi; i++ {
				changed, at := r.idx.store(p.events, seqs[i], parent, hasParent, engines[i], ev.Tier, parentAt)
				if changed {
					res.StoredBlocks++
				}
				parent, hasParent, parentAt = seqs[i], true, at
			}
		}
		res.Applied++
	case EventRemoved:
		for lo := 0; lo < len(ev.Removed); lo += prefetchChunk {
			chunk := ev.Removed[lo:min(lo+prefetchChunk, len(ev.Removed))]
			p.prefetch(r, nil, chunk)
			seqs, eis := p.seqBuf[:0], p.slotBuf[:0]
			for _, h := range chunk {
				ei := r.idx.byEngine.find(h)
				if ei >= 0 {
					seqs = append(seqs, r.idx.byEngine.slots[ei].val)
				}
				eis = append(eis, ei)
			}
			p.seqBuf, p.slotBuf = seqs, eis
			p.prefetch(r, seqs, nil)
			for k, h := range chunk {
				// The slot found above, unless a deletion since (an earlier block of this chunk) moved
				// the entry back along its probe chain: removals never insert, so a key found absent
				// stays absent, and a key still at its slot is there.
				ei := eis[k]
				if ei >= 0 && !r.idx.byEngine.holds(ei, h) {
					ei = r.idx.byEngine.find(h)
				}
				if ei < 0 || !r.idx.unstore(p.events, ei, ev.Tier) {
					res.BlockNotFound++
					continue
				}
				res.RemovedBlocks++
			}
		}
		res.Applied++
	case EventCleared:
		for _, rr := range w.ranks {
			p.clearRank(rr)
			rr.degraded = false
		}
		res.Applied++
	}
}

// prefetchChunk is how many of an event's blocks are prefetched and then applied at a time. A block's
// first read of the event table and of its rank's engine map each land on a random 4 KiB page, so a
// chunk touches up to 2 × prefetchChunk pages, and the apply loop that follows relies on their lines
// and translations still being cached. In a 64 MiB table on the shared box (BenchmarkRandomLineReread*)
// reading 256 touched random lines again is nearly free (touch + second read 35–41 ns a key, touch
// alone 35–40), 2,048 lines cost 15–20 ns a key more; half the stored blocks of the Mooncake replay
// arrive in events of more than 1,250 blocks, i.e. 2,500 touched lines. With PREFETCHT0 in place of the
// reads (amd64, BenchmarkRandomLineRereadPrefetched) the same pattern costs 12.7 ns a key; smaller chunks
// with the next chunk prefetched while one applies (32–128) measured no better on the replay.
const prefetchChunk = 256

// prefetch fetches the home cache lines of seqs in the event table and of engines in rank r's engine map
// (u64Map.prefetch): their misses overlap, so the finds, inserts and deletions that follow mostly hit
// the cache.
func (p *memPool) prefetch(r *memRank, seqs, engines []uint64) {
	p.sink += p.events.m.prefetch(seqs) + r.idx.byEngine.prefetch(engines)
}
