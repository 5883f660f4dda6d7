package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// Limits on one JSON event, so a hostile body cannot make the router hash or allocate without bound.
const (
	MaxBlocksPerEvent = 1 << 16
	MaxTokensPerEvent = 1 << 22
)

// RouterEvent is one KV event in Dynamo's RouterEvent JSON shape (SPEC §4.2 item 2).
type RouterEvent struct {
	Pool        string        `json:"pool,omitempty"`
	WorkerID    FlexString    `json:"worker_id"`
	StorageTier string        `json:"storage_tier,omitempty"`
	Event       RouterEventKV `json:"event"`
}

// RouterEventKV is the "event" object.
type RouterEventKV struct {
	EventID *uint64         `json:"event_id,omitempty"`
	DPRank  int             `json:"dp_rank,omitempty"`
	Epoch   FlexString      `json:"epoch,omitempty"`
	Data    json.RawMessage `json:"data"`
}

type storedData struct {
	ParentHash *Hash    `json:"parent_hash"`
	Blocks     []block  `json:"blocks"`
	TokenIDs   []uint32 `json:"token_ids,omitempty"`
	BlockSize  int      `json:"block_size,omitempty"`
	LoRAName   string   `json:"lora_name,omitempty"`
	// MMHashes are multimodal object hashes per block (block index → hashes), for token_ids events.
	MMHashes map[int][]Hash `json:"mm_hashes,omitempty"`
}

type block struct {
	BlockHash  Hash  `json:"block_hash"`
	TokensHash *Hash `json:"tokens_hash,omitempty"`
}

type removedData struct {
	BlockHashes []Hash `json:"block_hashes"`
}

// ParseTier maps a storage tier name or an engine medium to a tier (SPEC §4.1). "" is device.
func ParseTier(s string) (statestore.Tier, error) {
	switch strings.ToUpper(s) {
	case "", "DEVICE", "GPU", "G1":
		return statestore.TierDevice, nil
	case "HOST", "HOST_PINNED", "CPU", "CPU_PINNED", "CPU_TIER1", "G2":
		return statestore.TierHost, nil
	case "DISK", "NVME", "CPU_TIER2", "G3":
		return statestore.TierDisk, nil
	}
	return 0, fmt.Errorf("unknown storage tier %q (want device, host_pinned or disk)", s)
}

// ToStore converts one JSON event into a store event, hashing token ids when the event carries them.
// poolBlockSize is used when the event gives token ids without its own block_size.
func (ev *RouterEvent) ToStore(poolBlockSize int) (statestore.Event, error) {
	out := statestore.Event{DPRank: ev.Event.DPRank, Epoch: string(ev.Event.Epoch)}
	if ev.Event.DPRank < 0 || ev.Event.DPRank >= statestore.MaxDPSize {
		return out, fmt.Errorf("dp_rank %d out of range", ev.Event.DPRank)
	}
	if ev.Event.EventID != nil {
		out.EventID, out.HasEventID = *ev.Event.EventID, true
	}
	tier, err := ParseTier(ev.StorageTier)
	if err != nil {
		return out, err
	}
	out.Tier = tier
	data := bytes.TrimSpace(ev.Event.Data)
	if len(data) == 0 {
		return out, fmt.Errorf("event.data is missing")
	}
	if data[0] == '"' {
		var s string
		_ = json.Unmarshal(data, &s)
		if s != "cleared" {
			return out, fmt.Errorf("event.data string must be \"cleared\", got %q", s)
		}
		out.Kind = statestore.EventCleared
		return out, nil
	}
	var kinds map[string]json.RawMessage
	if err := json.Unmarshal(data, &kinds); err != nil || len(kinds) != 1 {
		return out, fmt.Errorf("event.data must be \"cleared\" or an object with exactly one of stored, removed, cleared")
	}
	for k, v := range kinds {
		switch k {
		case "stored":
			return out, parseStored(&out, v, poolBlockSize)
		case "removed":
			var rd removedData
			if err := strictUnmarshal(v, &rd); err != nil {
				return out, fmt.Errorf("removed: %s", jsonErr(err))
			}
			if len(rd.BlockHashes) > MaxBlocksPerEvent {
				return out, fmt.Errorf("removed: more than %d block hashes", MaxBlocksPerEvent)
			}
			out.Kind = statestore.EventRemoved
			out.Removed = make([]uint64, len(rd.BlockHashes))
			for i, h := range rd.BlockHashes {
				out.Removed[i] = uint64(h)
			}
			return out, nil
		case "cleared":
			out.Kind = statestore.EventCleared
			return out, nil
		}
		return out, fmt.Errorf("unknown event type %q (want stored, removed or cleared)", k)
	}
	return out, nil
}

func parseStored(out *statestore.Event, raw json.RawMessage, poolBlockSize int) error {
	var sd storedData
	if err := strictUnmarshal(raw, &sd); err != nil {
		return fmt.Errorf("stored: %s", jsonErr(err))
	}
	out.Kind = statestore.EventStored
	if sd.ParentHash != nil {
		out.Parent, out.HasParent = uint64(*sd.ParentHash), true
	}
	if len(sd.Blocks) > MaxBlocksPerEvent || len(sd.TokenIDs) > MaxTokensPerEvent {
		return fmt.Errorf("stored: event too large (max %d blocks, %d tokens)", MaxBlocksPerEvent, MaxTokensPerEvent)
	}
	out.BlockSize = sd.BlockSize
	if len(sd.TokenIDs) > 0 {
		bs := sd.BlockSize
		if bs == 0 {
			bs = poolBlockSize
		}
		if bs <= 0 || bs > statestore.MaxBlockSize {
			return fmt.Errorf("stored: block_size %d out of range", bs)
		}
		seed := blockhash.LoRASeed(sd.LoRAName)
		n := len(sd.TokenIDs) / bs
		if n != len(sd.Blocks) {
			return fmt.Errorf("stored: %d token ids make %d full blocks of %d but %d blocks are listed", len(sd.TokenIDs), n, bs, len(sd.Blocks))
		}
		out.Blocks = make([]statestore.StoredBlock, n)
		for i := range n {
			toks := sd.TokenIDs[i*bs : (i+1)*bs]
			var local uint64
			if mm := sd.MMHashes[i]; len(mm) > 0 {
				hs := make([]uint64, len(mm))
				for j, h := range mm {
					hs[j] = uint64(h)
				}
				local = blockhash.LocalMultimodal(toks, hs, seed)
			} else {
				local = blockhash.Local(toks, seed)
			}
			out.Blocks[i] = statestore.StoredBlock{EngineHash: uint64(sd.Blocks[i].BlockHash), LocalHash: local}
		}
		return nil
	}
	out.Blocks = make([]statestore.StoredBlock, len(sd.Blocks))
	for i, b := range sd.Blocks {
		if b.TokensHash == nil {
			return fmt.Errorf("stored: blocks[%d] has no tokens_hash and the event has no token_ids", i)
		}
		out.Blocks[i] = statestore.StoredBlock{EngineHash: uint64(b.BlockHash), LocalHash: uint64(*b.TokensHash)}
	}
	return nil
}

func strictUnmarshal(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
