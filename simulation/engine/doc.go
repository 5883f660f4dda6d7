// Package engine models one vLLM-like inference engine in virtual time, for the fleet simulator and the
// mock engine server: a KV block pool with prefix caching (BlockPool) that publishes KV cache events,
// and a continuous-batching scheduler with chunked prefill, recompute preemption and a simple step
// cost model (Engine).
//
// It is deterministic and passive: no goroutines, no clock, no randomness. Callers pass the time in
// (milliseconds, float64) and drive the engine one scheduler step at a time; the same calls always
// produce the same results and the same event stream.
//
// Block identity follows kvrouter (SPEC §3): the pool is keyed by sequence hashes. The engine hashes
// it publishes are deliberately opaque (a salted hash of the sequence hash), like vLLM's own block
// hashes, so consumers can only use them to link and remove blocks, never to match prompts.
package engine
