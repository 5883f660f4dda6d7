// Package eventlog reads KV event logs and answers offline questions about them (`kvrouter index`):
// it loads a log into a store, reports per-worker block counts and depth histograms, and answers
// overlap queries against the loaded index.
//
// A log is a file of JSON lines, each one of two kinds (they may be mixed):
//
//   - a RouterEvent (SPEC §4.2 item 2, the body of POST /v1/events), e.g.
//     {"worker_id":"w1","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"blocks":[...]}}}};
//   - a captured vLLM/SGLang ZMQ message (SPEC §4.2 item 1), the capture format of this package:
//     {"worker_id":"w1","dp_rank":0,"seq":17,"payload":"<base64 of the msgpack EventBatch>"}
//     where seq is the message's sequence number (the second ZMQ frame) and dp_rank the rank of the
//     endpoint it was read from (used when the batch carries no data_parallel_rank). A line is a
//     capture record when it has a "payload" key.
//
// Blank lines and lines starting with '#' are skipped. Events of a capture get event ids from seq (the
// message's k-th event is seq*MaxEventsPerMessage + k), so a replayed capture is applied in order and
// a repeated message is stale, as with the live subscriber; a seq lower than the endpoint's previous
// one is a restarted engine: its events carry a new epoch ("capture-N"), which clears the rank first.
// `kvrouter ingest --capture FILE` writes capture lines (CaptureWriter).
package eventlog
