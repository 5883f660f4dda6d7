// Package zmqpub is a vLLM-compatible KV event publisher: a ZMQ PUB socket sending
// [topic, seq u64 BE, payload] with sequence numbers from 0, a bounded replay buffer, and a ROUTER
// replay socket that answers [empty, start_seq u64 BE] with every buffered [empty, seq, payload] from
// start_seq on, then [empty, -1 as u64 BE, empty] — the protocol of vLLM's ZmqEventPublisher.
//
// The mock engine publishes through it, and the ingest tests use it as the engine. PublishLost
// injects faults: the message takes a sequence number and enters the replay buffer but is never sent.
package zmqpub
