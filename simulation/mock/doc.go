// Package mock is a simulated inference engine server for tests and demos without GPUs: the engine
// package's vLLM-like scheduler and block pool run in wall-clock time (scaled by Config.Speedup) behind
// an OpenAI-compatible HTTP API, and the pool's KV events are published on a ZMQ PUB socket in vLLM's
// exact wire format (ingest/zmqpub + vllmwire array form, with a ROUTER replay socket and a bounded
// replay buffer).
//
// # HTTP endpoints (one engine per listener)
//
//	POST /v1/completions        prompt: string, or token ids ([]int, as vLLM accepts); max_tokens; stream
//	POST /v1/chat/completions   messages [{role, content}]; max_tokens | max_completion_tokens; stream
//	GET  /v1/models, GET /health
//	GET  /metrics               vllm:num_requests_running, vllm:num_requests_waiting,
//	                            vllm:kv_cache_usage_perc, vllm:prompt_tokens_total,
//	                            vllm:generation_tokens_total, vllm:prefix_cache_queries_total,
//	                            vllm:prefix_cache_hits_total, vllm:request_success_total
//	GET  /debug/blocks          the pool's resident sequence hashes (sorted) and counters, for tests
//	GET|POST /admin/faults      read or replace the fault switches (JSON Faults)
//	POST /admin/restart         restart the engine: empty cache, fresh event sequence from 0
//
// Responses report the prefix cache hit in usage.prompt_tokens_details.cached_tokens (vLLM's
// --enable-prompt-tokens-details), so a client can measure the hit rate the engine saw. Generated
// text is deterministic: exactly max_tokens words (finish_reason "length"), chosen by hashing the
// prompt's token ids with the token's position. Streaming (SSE) sends the first token when the
// engine model samples it (a true TTFT) and the rest when the request finishes: the engine model
// reports first and last tokens only, not every decode step.
//
// # Built-in tokenizer
//
// A text prompt is split on white space (strings.Fields); each word w becomes the token id
// 100 + XXH3-64(w) mod 50000. A chat request is tokenized as the concatenation of its messages, each
// as the words "<role>:" followed by the content's words, so conversations that share their first
// messages share a token prefix. Token-id prompts are taken as they are.
//
// # KV events
//
// Every scheduler step's events are published as one EventBatch [ts, events, dp_rank] when the step
// ends: BlockStored carries the engine's opaque block hashes, the parent, the blocks' token ids and
// block_size (so an ingest recomputes kvrouter's own hashes), medium "GPU"; BlockRemoved carries the
// evicted engine hashes. A restart closes the publisher and binds a new one on the same ports, whose
// sequence starts again at 0 — what a restarted vLLM does.
//
// # Faults
//
// Faults (flags of `kvrouter mock`, or POST /admin/faults) drop event messages (they keep their
// sequence number and stay replayable, so subscribers see a gap), publish messages twice, delay
// them, answer completions with an HTTP error, slow responses down, or cut streams after their first
// chunk (fail_mid_stream_next: an engine dying mid-stream).
package mock
