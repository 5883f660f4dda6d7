package vllmwire

// Decoder bounds. They are far above anything an engine sends, and low enough that a hostile payload
// cannot make the decoder allocate more than a small multiple of its own size.
const (
	// MaxEvents is the most events one batch may hold (count).
	MaxEvents = 1 << 20
	// MaxBlockSize is the largest block_size accepted, in tokens.
	MaxBlockSize = 1 << 16
	// MaxDPRank is the largest data_parallel_rank accepted.
	MaxDPRank = 1<<16 - 1
	// maxDepth bounds the nesting of values that are skipped unread (extra_keys, unknown fields).
	maxDepth = 32
	// maxStringLen bounds tags, medium and LoRA names, in bytes.
	maxStringLen = 1 << 16
	// maxHashBytes bounds a byte-string block hash, in bytes (vLLM's sha256 digests are 32).
	maxHashBytes = 1 << 10
	// initialCap caps the capacity pre-allocated from a declared length: larger slices grow by append
	// as elements actually decode, so a lying length header cannot reserve memory.
	initialCap = 1 << 12
)
