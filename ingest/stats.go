package ingest

import "github.com/kvrouter/kvrouter/statestore"

// Stats are one subscriber's counters (monotonic unless noted) and gauges, read by Subscriber.Stats
// and Manager.Stats — e.g. by a Prometheus collector at scrape time.
type Stats struct {
	Key StreamKey

	// Gauges.
	Connected  bool   // a PUB connection is up
	Epoch      string // current epoch ("" before the first message)
	LastSeq    uint64 // sequence number of the last message handed on (valid when HasSeq)
	HasSeq     bool
	QueueDepth int   // decoded messages waiting for the sink
	LagMs      int64 // now − the engine timestamp of the last applied batch, in ms (clock skew included)

	// Messages.
	Messages  uint64 // messages received live
	Malformed uint64 // messages whose frames or payload did not decode (dropped; also counted lost)
	Oversized uint64 // connections closed for a frame or message beyond MaxMessageBytes (also Malformed)

	// Events decoded, by type (Normalize's view; Unknown are dropped).
	Events NormalizeStats

	// Outcomes, summed over every successful ApplyEvents call.
	Applied     statestore.ApplyResult
	ApplyCalls  uint64
	ApplyErrors uint64 // failed calls (each one retried)

	// Sequence.
	Gaps             uint64 // live messages that arrived after a missing sequence number
	MissedMessages   uint64 // messages missing across those gaps
	Replays          uint64 // replay requests sent
	ReplayFailures   uint64 // replay requests that failed (connect, timeout, protocol)
	ReplayedMessages uint64 // messages recovered by replay and applied
	LostMessages     uint64 // messages never applied (not replayable, or malformed)
	Restarts         uint64 // engine restarts detected (sequence went backwards, replay mismatch, or restart probe)
	RestartProbes    uint64 // restart probes sent (RestartProbeInterval; failures count in ReplayFailures)
	PartialHistory   uint64 // epochs whose recoverable history did not start at seq 0
	Reconnects       uint64 // connection attempts after the first
}
