package engine

import (
	"fmt"
	"math"
)

// DefaultKVTokens is the default KV cache size, tokens: Llama-3.1-8B (bf16, 128 KiB of KV per token:
// 32 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes) on one H100-80GB at vLLM's 0.9 memory
// utilisation: 72 GB − 16 GB of weights − ~6 GB of activations and CUDA graphs ≈ 50 GB ≈ 384 k tokens.
const DefaultKVTokens = 384_000

// Options configure an Engine. A zero field takes its default; Validate rejects the rest.
//
// Step cost model (virtual time, one scheduler step, milliseconds):
//
//	step_ms = StepOverheadMs + PrefillMsPerToken·prefill_tokens + DecodeMsPerSeq·decode_seqs
//	        + ContextMsPerToken·context_tokens
//
// prefill_tokens are the prompt tokens computed in the step (cache hits cost nothing), decode_seqs the
// requests generating one token, context_tokens the tokens already in KV that the step's requests
// attend to (a decode's whole context, a prefill chunk's earlier tokens). The defaults are calibrated
// roughly to Llama-3.1-8B in bf16 on one H100-SXM with vLLM:
//   - StepOverheadMs 6: reading 16 GB of weights at ~3.35 TB/s takes ~4.8 ms, plus scheduling and
//     launch overhead; a batch-1 decode step of an 8B model on an H100 is ~6–7 ms.
//   - PrefillMsPerToken 0.025: 2 × 8 G = 16 GFLOP per token at ~640 TFLOP/s (≈65 % of the 989 TFLOP/s
//     bf16 peak) → 40 k prefill tokens/s; a full 8192-token chunk takes ~211 ms, a 12 k-token prompt
//     ~312 ms. (The quadratic part of attention is folded into this constant.)
//   - DecodeMsPerSeq 0.025: a decode token is one token of the same compute.
//   - ContextMsPerToken 0.00004: attention reads 128 KiB of KV per context token at ~3.3 TB/s;
//     a full 384 k-token cache adds ~15 ms to a step.
type Options struct {
	// BlockSize is the KV block size, tokens (vLLM's --block-size). Default 16. Requests' hashes must be
	// computed at this size.
	BlockSize int
	// NumBlocks is the KV cache capacity, blocks. Default DefaultKVTokens / BlockSize (24 000 at 16).
	NumBlocks int
	// MaxNumBatchedTokens is the per-step token budget shared by decodes and prefill chunks, tokens
	// (vLLM's --max-num-batched-tokens, chunked prefill on). Default 8192.
	MaxNumBatchedTokens int
	// MaxNumSeqs bounds the running requests (vLLM's --max-num-seqs). Default 256.
	MaxNumSeqs int
	// Salt seeds the opaque engine hashes of this engine's KV events; give each engine its own.
	// Default 0 (still distinct from kvrouter's sequence hashes).
	Salt uint64
	// StepOverheadMs is the fixed cost of a step, ms. Default 6.
	StepOverheadMs float64
	// PrefillMsPerToken is the cost of one computed prompt token, ms. Default 0.025.
	PrefillMsPerToken float64
	// DecodeMsPerSeq is the cost of one decoding request in a step, ms. Default 0.025.
	DecodeMsPerSeq float64
	// ContextMsPerToken is the cost of one token of attended context, ms. Default 0.00004.
	ContextMsPerToken float64
}

// WithDefaults returns o with every zero field set to its default.
func (o Options) WithDefaults() Options {
	if o.BlockSize == 0 {
		o.BlockSize = 16
	}
	if o.NumBlocks == 0 && o.BlockSize > 0 {
		o.NumBlocks = max(1, DefaultKVTokens/o.BlockSize)
	}
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = 8192
	}
	if o.MaxNumSeqs == 0 {
		o.MaxNumSeqs = 256
	}
	if o.StepOverheadMs == 0 {
		o.StepOverheadMs = 6
	}
	if o.PrefillMsPerToken == 0 {
		o.PrefillMsPerToken = 0.025
	}
	if o.DecodeMsPerSeq == 0 {
		o.DecodeMsPerSeq = 0.025
	}
	if o.ContextMsPerToken == 0 {
		o.ContextMsPerToken = 0.00004
	}
	return o
}

// Validate reports the first invalid field, after defaults.
func (o Options) Validate() error {
	o = o.WithDefaults()
	switch {
	case o.BlockSize < 1:
		return fmt.Errorf("block size %d < 1", o.BlockSize)
	case o.NumBlocks < 1 || o.NumBlocks >= math.MaxInt32:
		return fmt.Errorf("num blocks %d out of [1, %d)", o.NumBlocks, math.MaxInt32)
	case o.MaxNumBatchedTokens < 1:
		return fmt.Errorf("max num batched tokens %d < 1", o.MaxNumBatchedTokens)
	case o.MaxNumSeqs < 1:
		return fmt.Errorf("max num seqs %d < 1", o.MaxNumSeqs)
	}
	for _, c := range []struct {
		name string
		v    float64
	}{
		{"step overhead ms", o.StepOverheadMs},
		{"prefill ms per token", o.PrefillMsPerToken},
		{"decode ms per seq", o.DecodeMsPerSeq},
		{"context ms per token", o.ContextMsPerToken},
	} {
		if math.IsNaN(c.v) || math.IsInf(c.v, 0) || c.v < 0 {
			return fmt.Errorf("%s %v must be finite and >= 0", c.name, c.v)
		}
	}
	return nil
}

// StepMs is the cost model: the duration of a step that computes prefillTokens prompt tokens, decodes
// decodeSeqs requests and attends to contextTokens tokens already in KV, milliseconds. o must have
// its defaults applied.
func (o Options) StepMs(prefillTokens, decodeSeqs, contextTokens int) float64 {
	return o.StepOverheadMs + o.PrefillMsPerToken*float64(prefillTokens) +
		o.DecodeMsPerSeq*float64(decodeSeqs) + o.ContextMsPerToken*float64(contextTokens)
}
