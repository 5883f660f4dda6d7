// Package vllmwire decodes and encodes the msgpack payloads of vLLM's KV cache events (SPEC §4.2
// item 1), as published on the engine's ZMQ PUB socket (default tcp://<engine>:5557) and served again
// by its ROUTER replay socket.
//
// vLLM encodes with msgspec (omit_defaults=True, tagged event structs). Depending on the version the
// structs are array_like (positional arrays) or plain (maps with field names); both are accepted:
//
//	EventBatch  [ts float64, events[], data_parallel_rank int|nil]   (third slot may be missing)
//	            {"ts": …, "events": […], "data_parallel_rank": …}     (key omitted when nil)
//	BlockStored ["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size,
//	             lora_id|nil, medium|nil, lora_name|nil, extra_keys|nil, …newer fields]
//	BlockRemoved ["BlockRemoved", block_hashes, medium|nil, …newer fields]
//	AllBlocksCleared ["AllBlocksCleared", …]
//	            or maps {"type": "BlockStored", "block_hashes": …, …}
//
// extra_keys is one entry per block: nil, or a tuple of the LoRA name, the multimodal items overlapping
// the block ([identifier, offset] pairs in vLLM 0.19+, bare identifiers before), the cache_salt and
// prompt-embedding digests; its strings and pairs decode into Event.ExtraKeys, other elements are
// skipped (the ingest decides which are multimodal items, docs/API.md "Multimodal block identity").
// Positional slots past extra_keys (group_idx, kv_cache_spec_kind, … in newer vLLM) are skipped
// unread: their meaning changes between versions. Unknown map keys are skipped too, and events with an
// unknown tag decode as KindUnknown (kept so a caller can count them) instead of failing the batch.
//
// The decoder is written for hostile input: every declared length is checked against the bytes that
// remain before anything is allocated, nesting is bounded, and a malformed payload is an error wrapping
// ErrMalformed or ErrLimit, never a panic.
package vllmwire
