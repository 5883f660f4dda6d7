package statestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/kvrouter/kvrouter/blockhash"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Event application in Redis. Lua cannot compute XXH3, so sequence hashes are computed in Go:
//
//  1. predict: walk the chunk, tracking engine hashes stored earlier in the chunk; parents not produced
//     in the chunk are read in one resolve_parents.lua call (engine hash → sequence hash, per rank);
//  2. compute every Stored block's sequence hash from its predicted parent (blockhash.Next);
//  3. apply_events.lua fences and applies the events in order and re-verifies each parent mapping
//     against the live index; at the first mismatch (a concurrent writer, a restart or removal inside
//     the chunk that the prediction did not model) it stops before that event and returns its index;
//     the caller re-reads and resumes there. Events before it are applied exactly once.
//
// Batches are split at event boundaries into calls of at most MaxBlocksPerCall blocks; a larger event is
// split into pieces (applyLarge).

func eventIDStr(id uint64) string { return fmt.Sprintf("%020d", id) }

func u64s(v uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], v)
	return string(b[:])
}

type parentRef struct {
	rank   int
	engine uint64
}

// ApplyEvents implements Store. Runs of events are applied in calls of at most MaxBlocksPerCall blocks
// (applyRun); an event larger than that is split into pieces of its own calls (applyLarge), so no call
// does unbounded work whatever one event holds (SPEC §8).
func (r *Redis) ApplyEvents(ctx context.Context, b EventBatch) (ApplyResult, error) {
	var res ApplyResult
	events := b.Events
	pred := predictions{}
	for len(events) > 0 {
		if eventBlocks(&events[0]) > MaxBlocksPerCall {
			got, err := r.applyLarge(ctx, b, events[0], pred)
			res.Add(got)
			if err != nil {
				return res, err
			}
			events = events[1:]
			continue
		}
		n := 1
		for n < len(events) && eventBlocks(&events[n]) <= MaxBlocksPerCall {
			n++
		}
		got, err := r.applyRun(ctx, b, events[:n], pred)
		res.Add(got)
		if err != nil {
			return res, err
		}
		events = events[n:]
	}
	return res, nil
}

// predictions maps (rank, engine hash) to the sequence hash the batch's earlier calls stored for it, so a
// later call (the next piece of a split event, the next run of a long batch) predicts those parents
// without a resolve_parents read. A prediction is only a guess: apply_events re-verifies every parent
// mapping against the live index and stops at the first mismatch, and the caller then forgets them all
// and reads again (applyRun).
type predictions map[parentRef]uint64

// eventBlocks is the number of blocks an event stores or removes.
func eventBlocks(ev *Event) int { return len(ev.Blocks) + len(ev.Removed) }

// applyLarge applies one event of more than MaxBlocksPerCall blocks as pieces of at most that many, each
// its own call. The first piece carries the event's id and epoch and is fenced like any event; the
// others continue it (a Stored piece's parent is the previous piece's last block) without an id, and
// are sent only if the first was applied — stale, unknown parent, block size mismatch or unknown worker
// drop the whole event, as one call would. Counts equal one call's: the event is applied once.
func (r *Redis) applyLarge(ctx context.Context, b EventBatch, ev Event, pred predictions) (ApplyResult, error) {
	var res ApplyResult
	for i, piece := range splitEvent(ev, MaxBlocksPerCall) {
		got, err := r.applyRun(ctx, b, []Event{piece}, pred)
		if i > 0 {
			got.Applied-- // a continuation of the event counted once already
		}
		res.Add(got)
		if err != nil || (i == 0 && got.Applied == 0) {
			return res, err
		}
	}
	return res, nil
}

// splitEvent cuts a Stored or Removed event into pieces of at most max blocks (see applyLarge).
func splitEvent(ev Event, max int) []Event {
	var out []Event
	first := true
	for ev.Kind == EventStored && len(ev.Blocks) > 0 || ev.Kind == EventRemoved && len(ev.Removed) > 0 {
		p := ev
		if ev.Kind == EventStored {
			n := min(max, len(ev.Blocks))
			p.Blocks = ev.Blocks[:n]
			ev.Blocks = ev.Blocks[n:]
			ev.Parent, ev.HasParent = p.Blocks[n-1].EngineHash, true
		} else {
			n := min(max, len(ev.Removed))
			p.Removed = ev.Removed[:n]
			ev.Removed = ev.Removed[n:]
		}
		if !first {
			p.HasEventID, p.EventID = false, 0
		}
		first = false
		out = append(out, p)
	}
	return out
}

// applyRun applies events (each of at most MaxBlocksPerCall blocks) in calls split at event boundaries.
func (r *Redis) applyRun(ctx context.Context, b EventBatch, events []Event, pred predictions) (ApplyResult, error) {
	var res ApplyResult
	stuck := 0
	for len(events) > 0 {
		n, blocks := 0, 0
		for n < len(events) && (n == 0 || blocks+eventBlocks(&events[n]) <= MaxBlocksPerCall) {
			blocks += eventBlocks(&events[n])
			n++
		}
		chunk := events[:n]
		args, err := r.applyArgs(ctx, b, chunk, pred)
		if err != nil {
			return res, err
		}
		arr, err := r.exec(ctx, luascripts.ApplyEvents, b.Pool, args)
		if err != nil {
			return res, err
		}
		if msgStr(arr[0]) == "unknown_pool" {
			return res, unknownPool(b.Pool)
		}
		next := int(msgInt(arr[1]))
		c := func(i int) int { return int(msgInt(arr[2+i])) }
		res.Add(ApplyResult{Applied: c(0), Stale: c(1), ParentNotFound: c(2), BlockNotFound: c(3), Gaps: c(4), Restarts: c(5),
			BlockSizeMismatch: c(6), UnknownWorker: c(7), StoredBlocks: c(8), RemovedBlocks: c(9)})
		if next < len(chunk) {
			clear(pred) // a predicted parent was wrong (or the chunk's rest is unknown): read them again
		}
		if next == 0 {
			if stuck++; stuck > 16 {
				return res, fmt.Errorf("statestore: redis apply_events: parent mapping keeps changing under a concurrent writer of worker %q", b.WorkerID)
			}
		} else {
			stuck = 0
		}
		events = events[next:]
	}
	return res, nil
}

// applyArgs builds one apply_events call for chunk. pred holds the sequence hashes earlier calls of the
// batch stored (see predictions); it is updated with this chunk's, as if the call applies it whole.
func (r *Redis) applyArgs(ctx context.Context, b EventBatch, chunk []Event, pred predictions) ([]string, error) {
	// Pass 1: which parents are neither produced inside the chunk nor predicted by an earlier call?
	local := pred // engine hashes stored earlier (this batch) → predicted seq
	produced := map[parentRef]bool{}
	var need []parentRef
	for i := range chunk {
		ev := &chunk[i]
		switch ev.Kind {
		case EventStored:
			if ev.HasParent {
				k := parentRef{ev.DPRank, ev.Parent}
				if _, known := local[k]; !produced[k] && !known {
					need = append(need, k)
				}
			}
			for _, blk := range ev.Blocks {
				produced[parentRef{ev.DPRank, blk.EngineHash}] = true
			}
		case EventCleared:
			// later parents are looked up as if nothing was stored; apply_events verifies.
		}
	}
	remote := map[parentRef]string{}
	if len(need) > 0 {
		args := make([]string, 0, 1+2*len(need))
		args = append(args, b.WorkerID)
		for _, k := range need {
			args = append(args, strconv.Itoa(k.rank), u64s(k.engine))
		}
		arr, err := r.exec(ctx, luascripts.ResolveParents, b.Pool, args)
		if err != nil {
			return nil, err
		}
		if msgStr(arr[0]) == "unknown_pool" {
			return nil, unknownPool(b.Pool)
		}
		for i, k := range need {
			if 1+i < len(arr) {
				remote[k] = msgStr(arr[1+i])
			}
		}
	}
	// Pass 2: predicted parents and sequence hashes.
	args := make([]string, 0, 3+11*len(chunk))
	jump := r.limits.maxEventIDJump()
	args = append(args, istr(b.NowMs), b.WorkerID, strconv.Itoa(len(chunk)))
	for i := range chunk {
		ev := &chunk[i]
		id, idm1, idmj := "", "", ""
		if ev.HasEventID {
			id = eventIDStr(ev.EventID)
			if ev.EventID > 0 {
				idm1 = eventIDStr(ev.EventID - 1)
			}
			if ev.EventID > jump {
				idmj = eventIDStr(ev.EventID - jump)
			}
		}
		pengine, pexpect := "", ""
		var blob []byte
		switch ev.Kind {
		case EventStored:
			var parent uint64
			has := false
			if ev.HasParent {
				k := parentRef{ev.DPRank, ev.Parent}
				pengine = u64s(ev.Parent)
				if s, ok := local[k]; ok {
					parent, has = s, true
				} else if s := remote[k]; len(s) == 8 {
					parent, has = binary.BigEndian.Uint64([]byte(s)), true
				}
				if has {
					pexpect = u64s(parent)
				}
			}
			blob = make([]byte, 0, 16*len(ev.Blocks))
			for j, blk := range ev.Blocks {
				var seq uint64
				if !ev.HasParent && j == 0 {
					seq = blk.LocalHash
				} else if ev.HasParent && !has && j == 0 {
					seq = 0 // parent unknown: apply_events drops the event (parent_block_not_found)
				} else {
					seq = blockhash.Next(parent, blk.LocalHash)
				}
				blob = binary.BigEndian.AppendUint64(blob, blk.EngineHash)
				blob = binary.BigEndian.AppendUint64(blob, seq)
				local[parentRef{ev.DPRank, blk.EngineHash}] = seq
				parent = seq
			}
		case EventRemoved:
			blob = make([]byte, 0, 8*len(ev.Removed))
			for _, h := range ev.Removed {
				blob = binary.BigEndian.AppendUint64(blob, h)
				delete(local, parentRef{ev.DPRank, h})
			}
		case EventCleared:
			clear(local)
		}
		args = append(args, strconv.Itoa(int(ev.Kind)), strconv.Itoa(ev.DPRank), id, idm1, ev.Epoch,
			strconv.Itoa(int(ev.Tier)), strconv.Itoa(ev.BlockSize), pengine, pexpect, string(blob), idmj)
	}
	return args, nil
}
