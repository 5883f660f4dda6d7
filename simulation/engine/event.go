package engine

// EventKind is the type of a KV cache event. Values match statestore.EventKind.
type EventKind uint8

const (
	// EventStored: blocks were cached, in chain order, continuing the parent block.
	EventStored EventKind = 1
	// EventRemoved: blocks were evicted.
	EventRemoved EventKind = 2
)

// StoredBlock is one block of a Stored event.
type StoredBlock struct {
	// EngineHash is the engine's opaque id of the block (SPEC §3: never used for matching).
	EngineHash uint64
	// LocalHash is kvrouter's local hash of the block's tokens (blockhash.Local), what a consumer would
	// recompute from the token ids a real engine sends.
	LocalHash uint64
}

// Event is one KV cache event, shaped like vLLM's BlockStored / BlockRemoved.
// An Event owns its slices: consumers may keep them.
type Event struct {
	Kind EventKind
	// Stored: the chain continues the block with engine hash ParentEngineHash; HasParent false means it
	// starts at position 0.
	ParentEngineHash uint64
	HasParent        bool
	Blocks           []StoredBlock
	// Removed: the evicted blocks' engine hashes, in eviction order.
	EngineHashes []uint64
}

// EventSink receives a pool's events synchronously, in order.
type EventSink func(Event)
