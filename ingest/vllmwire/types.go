package vllmwire

// Kind is the type of a decoded KV cache event.
type Kind uint8

const (
	// KindUnknown is an event whose tag this package does not know (a newer vLLM); its fields are
	// skipped and Event.Type holds the tag.
	KindUnknown Kind = 0
	KindStored  Kind = 1 // "BlockStored"
	KindRemoved Kind = 2 // "BlockRemoved"
	KindCleared Kind = 3 // "AllBlocksCleared"
)

// vLLM's struct names, used as msgspec tags (array slot 0, or the map's "type" value).
const (
	TagStored  = "BlockStored"
	TagRemoved = "BlockRemoved"
	TagCleared = "AllBlocksCleared"
)

// String returns the vLLM tag of the kind ("unknown" for KindUnknown).
func (k Kind) String() string {
	switch k {
	case KindStored:
		return TagStored
	case KindRemoved:
		return TagRemoved
	case KindCleared:
		return TagCleared
	}
	return "unknown"
}

// Batch is one decoded EventBatch: the payload of one ZMQ message.
type Batch struct {
	// TS is the engine's wall clock when the batch was built, in seconds since the Unix epoch.
	TS float64
	// DPRank is the data-parallel rank that published the batch; meaningful only when HasDPRank.
	DPRank    int
	HasDPRank bool
	Events    []Event
}

// Event is one decoded KV cache event. Only the fields of its Kind are set.
type Event struct {
	Kind Kind
	// Type is the tag of a KindUnknown event (empty for known kinds).
	Type string

	// BlockHashes are the engine's opaque block ids (Stored, Removed), normalised to uint64: integers
	// bit-cast, byte strings by their last min(8, len) bytes big-endian.
	BlockHashes []uint64
	// Parent is the engine hash of the block the stored chain continues (Stored; HasParent false: root).
	Parent    uint64
	HasParent bool
	// TokenIDs are the tokens of all stored blocks, concatenated (Stored). EAGLE pair lists are
	// flattened to the pairs' first elements plus the last pair's second.
	TokenIDs []uint32
	// BlockSize is the engine's KV block size in tokens (Stored).
	BlockSize int
	// LoRAID is vLLM's deprecated numeric adapter id (Stored); meaningful only when HasLoRAID.
	LoRAID    int64
	HasLoRAID bool
	// Medium is where the blocks live ("GPU", "CPU", "DISK", …; Stored, Removed); empty when nil.
	Medium string
	// LoRAName is the adapter name (Stored); empty for the base model.
	LoRAName string
	// ExtraKeys are vLLM's per-block extra hash keys (Stored; nil when the event has none): one entry
	// per block hash, nil for a block without keys. Only the string-like keys are kept (see ExtraKey);
	// prompt-embedding digests (bytes), numbers and shapes this package does not know are dropped.
	ExtraKeys [][]ExtraKey
}

// ExtraKey is one string-like element of a block's extra_keys tuple. vLLM (kv_cache_utils.py
// generate_block_hash_extra_keys) builds the tuple as LoRA name, then the multimodal items overlapping
// the block, then cache_salt (first block only), then prompt-embedding digests. A multimodal item is
// its identifier string (vLLM before 0.19) or an (identifier, start offset in the block) pair (0.19+).
type ExtraKey struct {
	// Identifier is the string: a multimodal item's identifier (mm_hash or the request's uuid), or,
	// when !Pair, possibly a LoRA name or a cache_salt.
	Identifier string
	// Pair is true when the element was an [identifier, offset] pair: certainly a multimodal item.
	Pair bool
	// Offset is the item's first placeholder token relative to the block's first token (negative when
	// the item started in an earlier block); meaningful only when Pair.
	Offset int64
}
