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
// Events are cut into pieces of at most MaxBlocksPerPiece blocks, sent in calls of at most
// MaxBlocksPerCall blocks, each stopped by apply_events' work budget (applyPieces).

// contArg is a piece's continuation flag as apply_events reads it ('1': continues the previous piece).
func contArg(cont bool) string {
	if cont {
		return "1"
	}
	return "0"
}

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

// ApplyEvents implements Store. Every event is cut into pieces of at most MaxBlocksPerPiece blocks
// (splitEvent), and the pieces go in calls of at most MaxBlocksPerCall blocks; apply_events stops before
// a piece once its work budget (applyWorkBudget Redis commands) is spent, and the rest goes in the next
// call — so no call does unbounded work whatever one event holds, nor more than the budget whatever the
// index already holds (SPEC §8).
func (r *Redis) ApplyEvents(ctx context.Context, b EventBatch) (ApplyResult, error) {
	var pieces []piece
	for _, ev := range b.Events {
		pieces = splitEvent(pieces, ev, MaxBlocksPerPiece)
	}
	return r.applyPieces(ctx, b, pieces, predictions{})
}

// predictions maps (rank, engine hash) to the sequence hash the batch's earlier calls stored for it, so a
// later call (the next piece of a split event, the next run of a long batch) predicts those parents
// without a resolve_parents read. A prediction is only a guess: apply_events re-verifies every parent
// mapping against the live index and stops at the first mismatch, and the caller then forgets them all
// and reads again (applyPieces).
type predictions map[parentRef]uint64

// eventBlocks is the number of blocks an event stores or removes.
func eventBlocks(ev *Event) int { return len(ev.Blocks) + len(ev.Removed) }

// piece is an event or a part of one. A continuation (cont) is a later part of a split event: it has no
// id of its own (the first piece is fenced like any event), a Stored continuation's parent is the
// previous piece's last block, and apply_events applies it only if the event's earlier pieces were
// applied — stale, unknown parent, block size mismatch or unknown worker drop the whole event, as one
// step would — and counts the event once.
type piece struct {
	Event
	cont bool
}

// splitEvent appends ev's pieces of at most max blocks to out.
func splitEvent(out []piece, ev Event, max int) []piece {
	if eventBlocks(&ev) <= max {
		return append(out, piece{Event: ev})
	}
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
		out = append(out, piece{Event: p, cont: !first})
		first = false
	}
	return out
}

// applyPieces applies pieces in calls of at most MaxBlocksPerCall blocks, each stopped by apply_events'
// work budget or at a wrong parent prediction and resumed where it stopped.
func (r *Redis) applyPieces(ctx context.Context, b EventBatch, pieces []piece, pred predictions) (ApplyResult, error) {
	var res ApplyResult
	stuck := 0
	for len(pieces) > 0 {
		n, blocks := 0, 0
		for n < len(pieces) && (n == 0 || blocks+eventBlocks(&pieces[n].Event) <= MaxBlocksPerCall) {
			blocks += eventBlocks(&pieces[n].Event)
			n++
		}
		chunk := pieces[:n]
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
		if len(arr) != 14 {
			return res, fmt.Errorf("statestore: redis apply_events: reply of %d values, want 14", len(arr))
		}
		next := int(msgInt(arr[1]))
		c := func(i int) int { return int(msgInt(arr[2+i])) }
		res.Add(ApplyResult{Applied: c(0), Stale: c(1), ParentNotFound: c(2), BlockNotFound: c(3), Gaps: c(4), Restarts: c(5),
			BlockSizeMismatch: c(6), UnknownWorker: c(7), StoredBlocks: c(8), RemovedBlocks: c(9)})
		budgetStop, lastApplied := c(10) == 1, c(11) == 1
		switch {
		case next < len(chunk) && !budgetStop:
			clear(pred) // a predicted parent was wrong: read them again
			if next == 0 {
				if stuck++; stuck > 16 {
					return res, fmt.Errorf("statestore: redis apply_events: parent mapping keeps changing under a concurrent writer of worker %q", b.WorkerID)
				}
			} else {
				stuck = 0
			}
		case next == 0:
			// The first piece of a call is always processed: a budget stop there is a broken script.
			return res, fmt.Errorf("statestore: redis apply_events: no progress within the work budget")
		default:
			stuck = 0
		}
		pieces = pieces[next:]
		// The pieces continuing an event that was not applied are dropped with it (apply_events does the
		// same within a call).
		for !lastApplied && len(pieces) > 0 && pieces[0].cont {
			pieces = pieces[1:]
		}
	}
	return res, nil
}

// applyArgs builds one apply_events call for chunk. pred holds the sequence hashes earlier calls of the
// batch stored (see predictions); it is updated with this chunk's, as if the call applies it whole.
func (r *Redis) applyArgs(ctx context.Context, b EventBatch, chunk []piece, pred predictions) ([]string, error) {
	// Pass 1: which parents are neither produced inside the chunk nor predicted by an earlier call?
	local := pred // engine hashes stored earlier (this batch) → predicted seq
	produced := map[parentRef]bool{}
	var need []parentRef
	for i := range chunk {
		ev := &chunk[i].Event
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
	args := make([]string, 0, 6+12*len(chunk))
	jump := r.limits.maxEventIDJump()
	args = append(args, istr(b.NowMs), b.WorkerID, strconv.Itoa(len(chunk)), strconv.Itoa(applyWorkBudget),
		strconv.FormatFloat(engineMapLoad, 'g', -1, 64), strconv.FormatFloat(eventIndexLoad, 'g', -1, 64))
	for i := range chunk {
		ev := &chunk[i].Event
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
			strconv.Itoa(int(ev.Tier)), strconv.Itoa(ev.BlockSize), pengine, pexpect, string(blob), idmj, contArg(chunk[i].cont))
	}
	return args, nil
}
