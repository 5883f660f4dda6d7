package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// StreamKey names one event stream: a (worker, dp rank) of a pool.
type StreamKey struct {
	Pool     string
	WorkerID string
	DPRank   int
}

func (k StreamKey) String() string { return fmt.Sprintf("%s/%s/%d", k.Pool, k.WorkerID, k.DPRank) }

// SubscriberConfig configures one Subscriber. Zero durations and sizes take the documented defaults.
type SubscriberConfig struct {
	// Pool and WorkerID name the worker in the store; both required.
	Pool     string
	WorkerID string
	// DPRank is the rank of batches that carry no data_parallel_rank (>= 0). Default 0.
	DPRank int
	// Endpoint is the engine's PUB socket, e.g. "tcp://engine:5557" (vLLM offsets the port by the dp
	// rank). Required.
	Endpoint string
	// ReplayEndpoint is the engine's ROUTER replay socket, e.g. "tcp://engine:5558". Empty: gaps are
	// counted and never filled, and the history before the first message is not recovered.
	ReplayEndpoint string
	// Topic is the subscription prefix. Default "" (every topic, as vLLM publishes by default).
	Topic string
	// BlockSize is the pool's KV block size in tokens, used to hash events without a block_size.
	// Required (> 0).
	BlockSize int

	// QueueSize bounds the decoded messages waiting for the sink (count). When full, the reader stops
	// reading the socket: back-pressure reaches the engine's PUB high-water mark, whose drops show up
	// as gaps and are replayed. Default 64.
	QueueSize int
	// MaxBatchEvents is the most events coalesced into one ApplyEvents call (count); a single larger
	// message is still applied whole. Default 4096.
	MaxBatchEvents int
	// ReconnectMin and ReconnectMax bound the exponential backoff between connection attempts.
	// Defaults 100ms and 10s.
	ReconnectMin time.Duration
	ReconnectMax time.Duration
	// DialTimeout bounds one TCP connect to the engine. Default 5s.
	DialTimeout time.Duration
	// ReplayTimeout bounds the wait for each frame of a replay answer (and its connect). Default 2s.
	ReplayTimeout time.Duration
	// ReplayMaxRounds bounds the replay requests made to fill one gap: a round that recovers some but
	// not all messages (the engine dropped part of its answer) is followed by another. Default 4.
	ReplayMaxRounds int
	// ApplyRetryMin and ApplyRetryMax bound the backoff between retries of a failed ApplyEvents
	// call; the same batch is retried until it succeeds or the subscriber stops. Defaults 50ms and 5s.
	ApplyRetryMin time.Duration
	ApplyRetryMax time.Duration
	// EpochPrefix starts every epoch name this subscriber creates. Default: a random per-process
	// prefix, so epochs never repeat across ingest restarts.
	EpochPrefix string
	// Now is the clock for EventBatch.NowMs and lag. Default time.Now.
	Now func() time.Time
	// Logger receives connection, gap and restart events. Default slog.Default().
	Logger *slog.Logger
	// MaxMessageBytes bounds one ZMQ message read from the engine (PUB or replay socket), in wire
	// bytes: every frame's header and body. A peer declaring a larger frame or message (or one of more
	// than 16 frames) has its connection closed before anything is allocated for it; the message is
	// counted in Stats.Oversized and Malformed, and the subscriber reconnects with backoff. Default
	// DefaultMaxMessageBytes (16 MiB).
	MaxMessageBytes int
	// RestartProbeInterval is how often an idle subscriber (no live message for that long) asks the
	// engine's replay socket whether it still holds the last message applied; right after every
	// reconnect it asks at once. An engine that lost it restarted: its rank's index is cleared then,
	// not at its next message (SPEC §4.1 restart rule, for engines that stay silent). Needs
	// ReplayEndpoint. Default 10s; negative disables the probe (a restart is then seen at the next
	// message).
	RestartProbeInterval time.Duration
	// Capture, if set, is called with every message handed on (live or replayed, in sequence order)
	// before it is decoded: `kvrouter ingest --capture` writes them to an event log (package eventlog).
	// It runs on the reader goroutine and must not keep payload. Default nil.
	Capture func(seq uint64, payload []byte)
}

// DefaultMaxMessageBytes is the default SubscriberConfig.MaxMessageBytes: 16 MiB. The largest real
// batches measured are far below: one BlockStored of 512 blocks × 16 tokens is 45 KiB of msgpack (57 KiB
// with byte-string hashes), one of 8192 blocks (a 128k-token prompt) 712 KiB (912 KiB); see
// TestDefaultMessageLimitAboveRealBatches.
const DefaultMaxMessageBytes = 16 << 20

// minMaxMessageBytes is the smallest MaxMessageBytes accepted: the ZMTP handshake's READY command
// (socket type and identity metadata) must fit.
const minMaxMessageBytes = 4 << 10

// Key is the stream the subscriber feeds.
func (c SubscriberConfig) Key() StreamKey {
	return StreamKey{Pool: c.Pool, WorkerID: c.WorkerID, DPRank: c.DPRank}
}

func (c *SubscriberConfig) setDefaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.QueueSize == 0 {
		c.QueueSize = 64
	}
	if c.MaxBatchEvents == 0 {
		c.MaxBatchEvents = 4096
	}
	def(&c.ReconnectMin, 100*time.Millisecond)
	def(&c.ReconnectMax, 10*time.Second)
	def(&c.DialTimeout, 5*time.Second)
	def(&c.ReplayTimeout, 2*time.Second)
	if c.ReplayMaxRounds == 0 {
		c.ReplayMaxRounds = 4
	}
	def(&c.ApplyRetryMin, 50*time.Millisecond)
	def(&c.ApplyRetryMax, 5*time.Second)
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = DefaultMaxMessageBytes
	}
	def(&c.RestartProbeInterval, 10*time.Second)
	if c.EpochPrefix == "" {
		c.EpochPrefix = processEpochPrefix
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports every invalid field, after defaults are applied to zero values.
func (c SubscriberConfig) Validate() error {
	c.setDefaults()
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if c.Pool == "" {
		bad("pool: required")
	}
	if c.WorkerID == "" {
		bad("worker id: required")
	}
	if c.DPRank < 0 {
		bad("dp rank %d: must be >= 0", c.DPRank)
	}
	if !validEndpoint(c.Endpoint) {
		bad("endpoint %q: want tcp://host:port or ipc://path", c.Endpoint)
	}
	if c.ReplayEndpoint != "" && !validEndpoint(c.ReplayEndpoint) {
		bad("replay endpoint %q: want tcp://host:port or ipc://path", c.ReplayEndpoint)
	}
	if c.BlockSize <= 0 {
		bad("block size %d: must be > 0", c.BlockSize)
	}
	if c.QueueSize < 0 || c.MaxBatchEvents < 0 || c.ReplayMaxRounds < 0 {
		bad("queue size, max batch events and replay rounds must be >= 0")
	}
	if c.MaxMessageBytes < minMaxMessageBytes {
		bad("max message bytes %d: must be >= %d", c.MaxMessageBytes, minMaxMessageBytes)
	}
	for name, d := range map[string]time.Duration{
		"reconnect min": c.ReconnectMin, "reconnect max": c.ReconnectMax, "dial timeout": c.DialTimeout,
		"replay timeout": c.ReplayTimeout, "apply retry min": c.ApplyRetryMin, "apply retry max": c.ApplyRetryMax,
	} {
		if d < 0 {
			bad("%s %v: must be >= 0", name, d)
		}
	}
	if c.ReconnectMax < c.ReconnectMin || c.ApplyRetryMax < c.ApplyRetryMin {
		bad("backoff maxima must be >= minima")
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: subscriber %s: %w", ErrInvalidConfig, c.Key(), err)
	}
	return nil
}

func validEndpoint(ep string) bool {
	return (strings.HasPrefix(ep, "tcp://") && len(ep) > len("tcp://")) ||
		(strings.HasPrefix(ep, "ipc://") && len(ep) > len("ipc://"))
}
