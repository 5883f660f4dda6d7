package ingest

import (
	"strconv"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/statestore"
)

// NormalizeParams is the context Normalize needs beyond the batch itself.
type NormalizeParams struct {
	// DPRank is the rank of events whose batch carries no data_parallel_rank (the endpoint's rank).
	DPRank int
	// Epoch is stamped on every event (the engine process as the subscriber knows it).
	Epoch string
	// FirstEventID is the id of the first emitted event; each following one is one higher. 0 means
	// the events carry no id (HasEventID false: the store applies them unordered).
	FirstEventID uint64
	// PoolBlockSize, in tokens, hashes the tokens of a Stored event that declares no block_size.
	PoolBlockSize int
}

// NormalizeStats counts what Normalize did with a batch's events.
type NormalizeStats struct {
	Stored  int // Stored events emitted
	Removed int // Removed events emitted
	Cleared int // Cleared events emitted
	// Unknown counts events of a type this ingest does not know (a newer engine): dropped.
	Unknown int
	// UnknownMedium counts emitted events whose medium is not in the tier table: sent as device.
	UnknownMedium int
	// Unhashable counts Stored events whose token ids do not split into exactly one full block per
	// block hash (or that have no block size at all), or whose extra_keys list is not one entry per
	// block hash: dropped, since their local hashes are unknown.
	Unhashable int
	// LoRAIDOnly counts Stored events with a numeric lora_id but no lora_name: hashed under the
	// synthetic name "lora_id:<id>", so they never match base-model prompts.
	LoRAIDOnly int
}

// Add accumulates o into s.
func (s *NormalizeStats) Add(o NormalizeStats) {
	s.Stored += o.Stored
	s.Removed += o.Removed
	s.Cleared += o.Cleared
	s.Unknown += o.Unknown
	s.UnknownMedium += o.UnknownMedium
	s.Unhashable += o.Unhashable
	s.LoRAIDOnly += o.LoRAIDOnly
}

// Emitted is the number of events Normalize appended.
func (s NormalizeStats) Emitted() int { return s.Stored + s.Removed + s.Cleared }

// Normalize appends to dst the store events of one decoded batch, in order: engine hashes are kept
// as opaque ids, local hashes are recomputed from the token ids (SPEC §3: the LoRA name seeds them,
// the event's block_size cuts them), media become tiers, and events get consecutive ids from
// p.FirstEventID. A Stored event's BlockSize is its declared block_size, so the store rejects a size
// that differs from the pool's. Dropped events consume no id.
func Normalize(dst []statestore.Event, b vllmwire.Batch, p NormalizeParams) ([]statestore.Event, NormalizeStats) {
	var st NormalizeStats
	rank := p.DPRank
	if b.HasDPRank {
		rank = b.DPRank
	}
	id := p.FirstEventID
	emit := func(ev statestore.Event) {
		ev.DPRank, ev.Epoch = rank, p.Epoch
		if p.FirstEventID != 0 {
			ev.EventID, ev.HasEventID = id, true
			id++
		}
		dst = append(dst, ev)
	}
	for i := range b.Events {
		e := &b.Events[i]
		switch e.Kind {
		case vllmwire.KindStored:
			blocks, ok := localBlocks(e, p.PoolBlockSize, &st)
			if !ok {
				st.Unhashable++
				continue
			}
			tier := tierCounted(e.Medium, &st)
			st.Stored++
			emit(statestore.Event{
				Kind: statestore.EventStored, Tier: tier, BlockSize: e.BlockSize,
				Parent: e.Parent, HasParent: e.HasParent, Blocks: blocks,
			})
		case vllmwire.KindRemoved:
			tier := tierCounted(e.Medium, &st)
			st.Removed++
			emit(statestore.Event{Kind: statestore.EventRemoved, Tier: tier, Removed: e.BlockHashes})
		case vllmwire.KindCleared:
			st.Cleared++
			emit(statestore.Event{Kind: statestore.EventCleared})
		default:
			st.Unknown++
		}
	}
	return dst, st
}

func tierCounted(medium string, st *NormalizeStats) statestore.Tier {
	t, known := TierOf(medium)
	if !known {
		st.UnknownMedium++
	}
	return t
}

// localBlocks pairs each engine hash with the local hash of its tokens and multimodal items (SPEC
// §3). It fails when the tokens do not make exactly one full block per hash (a trailing partial block
// is ignored, SPEC §3) or extra_keys is not one entry per hash.
func localBlocks(e *vllmwire.Event, poolBlockSize int, st *NormalizeStats) ([]statestore.StoredBlock, bool) {
	bs := e.BlockSize
	if bs <= 0 {
		bs = poolBlockSize
	}
	if bs <= 0 || len(e.TokenIDs)/bs != len(e.BlockHashes) {
		return nil, false
	}
	if e.ExtraKeys != nil && len(e.ExtraKeys) != len(e.BlockHashes) {
		return nil, false
	}
	name := e.LoRAName
	if name == "" && e.HasLoRAID {
		name = "lora_id:" + strconv.FormatInt(e.LoRAID, 10)
		st.LoRAIDOnly++
	}
	seed := blockhash.LoRASeed(name)
	blocks := make([]statestore.StoredBlock, len(e.BlockHashes))
	var mm []uint64
	for i, h := range e.BlockHashes {
		toks := e.TokenIDs[i*bs : (i+1)*bs]
		if e.ExtraKeys != nil {
			mm = appendMMHashes(mm[:0], e.ExtraKeys[i], e.LoRAName)
		}
		blocks[i] = statestore.StoredBlock{EngineHash: h, LocalHash: blockhash.LocalMultimodal(toks, mm, seed)}
	}
	return blocks, true
}

// appendMMHashes appends the multimodal item hashes among one block's extra keys: every
// [identifier, offset] pair (vLLM 0.19+), and every bare string that is a canonical 64-hex identifier
// (older vLLM). Other bare strings are the LoRA name (already in the seed), a cache_salt, or an item
// named by a non-canonical uuid, which older vLLM publishes indistinguishably: they are not folded
// (the gateway always assigns canonical identifiers, so its requests never depend on them).
func appendMMHashes(dst []uint64, keys []vllmwire.ExtraKey, loraName string) []uint64 {
	for _, k := range keys {
		if k.Pair || (k.Identifier != loraName && blockhash.IsCanonicalMMIdentifier(k.Identifier)) {
			dst = append(dst, blockhash.MMIdentifierHash(k.Identifier))
		}
	}
	return dst
}
