package traces

// TraceBlockTokens is the number of tokens one trace hash id stands for (the Mooncake traces' block).
const TraceBlockTokens = 512

// Request is one request of a trace.
type Request struct {
	// ArrivalMs is the arrival time in milliseconds since the start of the trace.
	ArrivalMs int64
	// InputTokens is the prompt length in tokens.
	InputTokens int
	// OutputTokens is the number of generated tokens.
	OutputTokens int
	// HashIDs holds one prefix id per TraceBlockTokens-token block of the prompt (the last block may be
	// partial): equal ids at the same position mean equal prefixes up to the end of that block.
	// Empty when the trace has no prefix information (Azure before SyntheticPrefixes).
	HashIDs []uint64
	// Session is the conversation a request belongs to (1-based), set by SyntheticPrefixes so that the
	// simulator can exercise session affinity; 0 when the trace does not say (Mooncake, raw Azure).
	Session int
}

// traceBlocks returns ceil(inputTokens / TraceBlockTokens): the number of hash ids a prompt needs.
func traceBlocks(inputTokens int) int {
	return (inputTokens + TraceBlockTokens - 1) / TraceBlockTokens
}
