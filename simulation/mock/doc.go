// Package mock is a simulated inference engine server for tests and demos without GPUs: the engine
// package's vLLM-like scheduler and block pool run in wall-clock time (scaled by Config.Speedup) behind
// an OpenAI-compatible HTTP API, and the pool's KV events are published on a ZMQ PUB socket in vLLM's
// exact wire format (ingest/zmqpub + vllmwire array form, with a ROUTER replay socket and a bounded
// replay buffer).
//
// # HTTP endpoints (one engine per listener)
//
//	POST /v1/completions        prompt: string, or token ids ([]int, as vLLM accepts); max_tokens; stream
//	POST /v1/chat/completions   messages [{role, content}] (content: a string or parts: text, and images
//	                            with Config.ImageTokens); max_tokens | max_completion_tokens; stream;
//	                            add_generation_prompt (default true), continue_final_message
//	POST /tokenize              vLLM's: {model?, prompt, add_special_tokens?} or {model?, messages,
//	                            add_generation_prompt?, continue_final_message?, add_special_tokens?},
//	                            return_token_strs? → {count, max_model_len, tokens[, token_strs]}
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
// --enable-prompt-tokens-details): non-streamed answers always, streamed ones in the final usage chunk
// when stream_options.include_usage is set; cached_tokens is the engine's prefix cache hit at admission,
// tokens. Generated text is deterministic: exactly max_tokens words (finish_reason "length"), chosen
// by hashing the prompt's token ids with the token's position.
//
// # Streaming
//
// Streaming (SSE) sends one chunk per output token when the engine model samples it: the first at the
// end of the prefill step (a true TTFT), each next one at the end of the decode step that samples it
// (~6 ms apart at batch 1 with the default cost model, more in a busy batch, divided by Speedup), then
// the usage chunk if asked and "data: [DONE]". Config.ITLMs (`kvrouter mock --itl-ms`) adds a least
// interval between tokens (virtual ms): a token goes out when the engine has sampled it and its turn
// has come; the engine still computes at its own pace. A non-streamed answer comes whole once its last token is due. When the client goes
// away (connection closed, write error) the engine aborts the request and frees its KV blocks, as vLLM
// does.
//
// # Built-in tokenizer
//
// A text prompt is split on white space (strings.Fields); each word w becomes the token id
// 100 + XXH3-64(w) mod 50000; there are no special tokens (add_special_tokens has no effect).
// Token-id prompts are taken as they are. The chat template renders each message as the words
// "<role>:" followed by the content's words, then "assistant:" when add_generation_prompt is true
// (the default, as vLLM's), so a conversation's next request extends the previous one's tokens.
// POST /tokenize runs the very same functions: its ids are those a completion of that prompt or
// those messages is served with (the gateway's `tokenize: engine` relies on it).
//
// # Multimodal (Config.ImageTokens, `kvrouter mock --multimodal`)
//
// Chat content parts of type "image_url" (or "input_image", or untyped with an "image_url" key; the
// URL an http(s) URL or a data URI, or absent when a "uuid" is given) expand in place to
// ImageStartToken (97), ImageTokens × ImageTokenID (99), ImageEndToken (98) — the shape of Qwen2-VL's
// <|vision_start|><|image_pad|>…<|vision_end|>; the run of 99 is the image's span. The image's
// identifier is the part's "uuid" as given (vLLM's multi_modal_uuids), else blockhash.MMIdentifier of
// its URL (what the gateway would assign). Blocks overlapping the span fold the identifier's hash into
// their block hash (so different images are different cached blocks) and BlockStored carries
// extra_keys like vLLM 0.19+: per block None or a tuple of (identifier, offset of the image in the
// block) pairs. Without ImageTokens, image parts are ignored.
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
// them, answer completions with an HTTP error, slow responses down, or cut streams in the middle
// (fail_mid_stream_next M: the next M streams, fail_mid_stream_after N: every stream, after N token
// chunks, default 1; the TCP connection closes without the chunked body's terminator and no SSE
// error event is sent — what clients of a crashed vLLM see; the engine drops the request).
package mock
