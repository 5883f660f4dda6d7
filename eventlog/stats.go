package eventlog

import (
	"math/bits"
	"sort"

	"github.com/kvrouter/kvrouter/statestore"
)

// RankStats describes what one (worker, dp_rank) holds after the whole log.
type RankStats struct {
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
	// Blocks counts distinct blocks held (in any tier).
	Blocks int `json:"blocks"`
	// MaxDepth is the deepest block's position in its prefix chain (a root block has depth 1).
	MaxDepth int `json:"max_depth"`
	// Depths is the histogram of block depths in power-of-two buckets [Min, Max], empty buckets left out.
	Depths []DepthBucket `json:"depths"`
	// Dropped counts events not applied: stale ids, unknown parents, block-size mismatches.
	Dropped int `json:"dropped_events"`
}

// DepthBucket counts the blocks whose depth is in [Min, Max].
type DepthBucket struct {
	Min    int `json:"min"`
	Max    int `json:"max"`
	Blocks int `json:"blocks"`
}

type heldBlock struct {
	depth int
	tiers uint8 // bit per statestore.Tier
}

type rankState struct {
	blocks  map[uint64]heldBlock // by engine hash
	epoch   string
	lastID  uint64
	hasID   bool
	dropped int
}

// Stats replays the log offline, following the store's rules (ids ordered per rank, an epoch change
// clears the rank, a Stored event whose parent the rank does not hold is dropped, a block size other
// than blockSize is dropped), and reports every (worker, dp_rank) seen, sorted by worker then rank.
func Stats(l *Log, blockSize int) []RankStats {
	type key struct {
		worker string
		rank   int
	}
	ranks := map[key]*rankState{}
	for _, b := range l.Batches {
		for i := range b.Events {
			ev := &b.Events[i]
			k := key{b.WorkerID, ev.DPRank}
			r := ranks[k]
			if r == nil {
				r = &rankState{blocks: map[uint64]heldBlock{}}
				ranks[k] = r
			}
			r.apply(ev, blockSize)
		}
	}
	out := make([]RankStats, 0, len(ranks))
	for k, r := range ranks {
		s := RankStats{WorkerID: k.worker, DPRank: k.rank, Blocks: len(r.blocks), Dropped: r.dropped}
		hist := map[int]int{} // bucket index → blocks
		for _, h := range r.blocks {
			s.MaxDepth = max(s.MaxDepth, h.depth)
			hist[bits.Len(uint(h.depth))-1]++
		}
		for i := 0; i < bits.Len(uint(s.MaxDepth)); i++ {
			if n := hist[i]; n > 0 {
				s.Depths = append(s.Depths, DepthBucket{Min: 1 << i, Max: 1<<(i+1) - 1, Blocks: n})
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].WorkerID != out[j].WorkerID {
			return out[i].WorkerID < out[j].WorkerID
		}
		return out[i].DPRank < out[j].DPRank
	})
	return out
}

func (r *rankState) apply(ev *statestore.Event, blockSize int) {
	if ev.Epoch != "" && r.epoch != "" && ev.Epoch != r.epoch {
		clear(r.blocks)
		r.hasID = false
	}
	if ev.Epoch != "" {
		r.epoch = ev.Epoch
	}
	if ev.HasEventID {
		if r.hasID && ev.EventID <= r.lastID {
			r.dropped++
			return
		}
		r.lastID, r.hasID = ev.EventID, true
	}
	bit := uint8(1) << uint(ev.Tier)
	switch ev.Kind {
	case statestore.EventStored:
		if ev.BlockSize > 0 && ev.BlockSize != blockSize {
			r.dropped++
			return
		}
		depth := 0
		if ev.HasParent {
			p, ok := r.blocks[ev.Parent]
			if !ok {
				r.dropped++
				return
			}
			depth = p.depth
		}
		for _, blk := range ev.Blocks {
			depth++
			h := r.blocks[blk.EngineHash]
			h.depth, h.tiers = depth, h.tiers|bit
			r.blocks[blk.EngineHash] = h
		}
	case statestore.EventRemoved:
		for _, hash := range ev.Removed {
			h, ok := r.blocks[hash]
			if !ok {
				continue
			}
			if h.tiers &^= bit; h.tiers == 0 {
				delete(r.blocks, hash)
			} else {
				r.blocks[hash] = h
			}
		}
	case statestore.EventCleared:
		clear(r.blocks)
	}
}
