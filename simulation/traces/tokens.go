package traces

import (
	"fmt"
	"slices"

	"github.com/kvrouter/kvrouter/blockhash"
)

// TokenOffset is added to a hash id to form its token value. NVIDIA Dynamo's benchmark uses 0; it is
// kept at exactly 0 so that kvrouter's block hashes of a trace equal Dynamo's.
const TokenOffset = 0

// promptTokens is the number of tokens Tokens produces: the prompt, bounded by the ids present.
func promptTokens(req Request) int {
	return min(req.InputTokens, TraceBlockTokens*len(req.HashIDs))
}

// Tokens appends the prompt's token ids to dst and returns it, by Dynamo's convention: trace block i
// is TraceBlockTokens copies of the token uint32(HashIDs[i]) + TokenOffset, and the last block is cut
// to InputTokens. A request without hash ids has no tokens.
func Tokens(req Request, dst []uint32) []uint32 {
	n := promptTokens(req)
	for i := 0; n > 0; i++ {
		tok := uint32(req.HashIDs[i]) + TokenOffset
		m := min(n, TraceBlockTokens)
		for range m {
			dst = append(dst, tok)
		}
		n -= m
	}
	return dst
}

// BlockHashes returns the local and sequence hashes (SPEC §3) of the prompt's full engine blocks of
// engineBlock tokens, for the LoRA adapter lora ("" = base model): exactly what blockhash gives for
// Tokens(req), a trailing partial engine block not hashed. See AppendBlockHashes to reuse buffers.
func BlockHashes(req Request, engineBlock int, lora string) (local, seq []uint64) {
	return AppendBlockHashes(nil, nil, req, engineBlock, lora)
}

// AppendBlockHashes is BlockHashes appending to local and seq (pass buf[:0] to reuse memory).
//
// Fast path, for engine blocks that divide 512 (16, 64, 512, ...): the k-token engine blocks that a
// 512-token trace block splits into all hold the same tokens, so they share one local hash; it is
// computed once per trace block and repeated, and only the sequence chain is computed per engine
// block. Other sizes hash the token ids. It panics if engineBlock < 1 (a caller bug).
func AppendBlockHashes(local, seq []uint64, req Request, engineBlock int, lora string) ([]uint64, []uint64) {
	if engineBlock < 1 {
		panic(fmt.Sprintf("traces: engine block size %d < 1", engineBlock))
	}
	seed := blockhash.LoRASeed(lora)
	start := len(local)
	n := promptTokens(req) / engineBlock // full engine blocks
	if TraceBlockTokens%engineBlock != 0 {
		local = blockhash.LocalHashes(local, Tokens(req, make([]uint32, 0, promptTokens(req))), engineBlock, seed)
		return local, blockhash.Sequence(seq, local[start:])
	}
	perTrace := TraceBlockTokens / engineBlock
	local = slices.Grow(local, n)
	var buf [TraceBlockTokens]uint32
	block := buf[:engineBlock]
	for t := 0; t*perTrace < n; t++ {
		tok := uint32(req.HashIDs[t]) + TokenOffset
		for i := range block {
			block[i] = tok
		}
		h := blockhash.Local(block, seed)
		for range min(perTrace, n-t*perTrace) {
			local = append(local, h)
		}
	}
	return local, blockhash.Sequence(seq, local[start:])
}
