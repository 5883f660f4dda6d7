// Package ingest turns engine KV cache events into statestore.EventBatch calls (SPEC §4).
//
// For vLLM/SGLang engines a Subscriber per (worker, dp rank) endpoint reads the engine's ZMQ PUB
// socket (multipart [topic, seq u64 BE, msgpack payload]), decodes payloads with ingest/vllmwire,
// normalises them (Normalize: medium → tier, token ids → kvrouter's own local hashes) and hands them,
// in order, through a bounded queue to a Sink (the state store). A Manager runs many subscribers.
//
// # Sequence numbers, epochs and event ids
//
// The ZMQ sequence number orders messages, not events: one message carries a batch of events. The
// subscriber itself does all sequence work — it detects gaps (seq jumps by more than one) and fills
// them from the engine's replay socket, and detects engine restarts (seq goes backwards, or the
// replayed payload of the last applied seq differs from what was applied) — so the store never sees
// a duplicate or an out-of-order message from it.
//
// Store events carry a dense per-(epoch, dp rank) event id instead: 1, 2, 3, … one per event handed
// to the store, in sequence order. The store's per-(worker, rank) fencing therefore sees consecutive
// ids on a healthy stream (no false "gap"), a retried ApplyEvents call is idempotent (same ids), and a
// message lost for good (beyond the replay buffer, replay failed, payload malformed) makes the
// subscriber skip one id, so the store counts exactly one gap and reports the rank degraded. Ids
// derived from the sequence (seq<<16 | index) were rejected: consecutive messages would not be
// consecutive ids, and a store that counts a gap whenever id != last+1 would flag every message.
//
// Each subscriber run starts a new epoch (a process-unique name), as does every detected restart: the
// store then clears the rank once and the subscriber replays the engine's buffered history from seq
// 0. Ids are therefore never compared across ingest processes: a restarted ingest rebuilds each
// worker's index from the replay buffer rather than trusting ids it did not assign.
//
// # Idle restarts and hostile peers
//
// An engine that restarts and then stays silent would keep its stale index until its next message.
// So, right after every reconnect and after RestartProbeInterval without a message, the subscriber asks
// the replay socket for the last message it applied (restartprobe.go): gone or different means a new
// process, and a new epoch opens at once with a cleared event per rank.
//
// Engine endpoints are dialled through frame-limited zmq4 transports (framelimit.go): zmq4 allocates
// whatever size a frame header declares, so a header over MaxMessageBytes fails the read before zmq4
// sees it, and only that stream's connection ends.
package ingest
