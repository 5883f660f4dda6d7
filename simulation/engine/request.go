package engine

// Request is one inference request as the engine sees it.
type Request struct {
	// ID names the request in results; unique among the engine's unfinished requests.
	ID uint64
	// InputTokens is the prompt length, tokens (>= 1).
	InputTokens int
	// OutputTokens is the number of tokens to generate (0 is taken as 1: the first token always is).
	OutputTokens int
	// SeqHashes and LocalHashes are the prompt's full-block hashes at the engine's BlockSize
	// (traces.BlockHashes, or blockhash), same length, at most InputTokens/BlockSize. Fewer (even none)
	// is allowed: the remaining blocks are computed but never cached. The engine keeps the slices;
	// do not modify them while the request runs.
	SeqHashes   []uint64
	LocalHashes []uint64
}

// seqState is the scheduler's state of one request (vLLM's Request: num_tokens, num_computed_tokens).
type seqState struct {
	req       Request
	output    int     // tokens to generate, >= 1
	generated int     // tokens sampled so far
	computed  int     // tokens whose KV is in the cache (computed or hit); reset by preemption
	hashed    int     // leading SeqHashes held in the pool
	slots     []int32 // their pool slots (len hashed)
	private   int     // private blocks held
	started   bool
}

// numTokens is the sequence length: prompt plus sampled tokens (vLLM's num_tokens).
func (s *seqState) numTokens() int { return s.req.InputTokens + s.generated }
