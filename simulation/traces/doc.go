// Package traces loads public LLM request traces and turns them into what the benchmarks, the fleet
// simulator and the mock engine consume: requests with arrival times, lengths, token ids and kvrouter
// block hashes.
//
// Two sources are supported:
//
//   - Mooncake JSONL (kvcache-ai/Mooncake FAST'25 traces): one request per line with one prefix id per
//     512-token block (hash_ids). Token ids and block hashes are derived from the ids with NVIDIA
//     Dynamo's convention (Tokens), so the prefix structure of the trace survives at any engine block
//     size that divides 512.
//   - Azure LLM inference CSV (Splitwise, ISCA'24): arrivals and lengths only. SyntheticPrefixes gives
//     such requests a documented, seeded synthetic prefix tree.
//
// The package is transport-free and allocation-light: BlockHashes runs on every request of a trace,
// repeatedly, inside the simulator.
package traces
