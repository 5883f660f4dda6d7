package ingest

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/statestore"
)

// Subscriber follows one engine endpoint's KV event stream and applies it to a Sink, in order and
// exactly once per epoch (see the package doc for sequences, epochs and ids).
type Subscriber struct {
	cfg  SubscriberConfig
	sink Sink
	zlog *log.Logger // zmq4's internal messages, at debug level

	running atomic.Bool
	st      stream // reader goroutine only

	statsMu sync.Mutex
	stats   Stats
	queue   chan applyItem // while running, for QueueDepth
}

// applyItem is one message's events on their way to the sink.
type applyItem struct {
	events []statestore.Event
	ts     float64 // engine timestamp, seconds since the Unix epoch
}

// NewSubscriber validates cfg; it opens no connection (Run does).
func NewSubscriber(cfg SubscriberConfig, sink Sink) (*Subscriber, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sink == nil {
		return nil, fmt.Errorf("%w: subscriber %s: nil sink", ErrInvalidConfig, cfg.Key())
	}
	cfg.setDefaults()
	s := &Subscriber{
		cfg:  cfg,
		sink: sink,
		zlog: slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	s.stats.Key = cfg.Key()
	return s, nil
}

// Key is the stream this subscriber feeds.
func (s *Subscriber) Key() StreamKey { return s.cfg.Key() }

// Stats returns a snapshot of the counters.
func (s *Subscriber) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	st := s.stats
	st.QueueDepth = len(s.queue)
	return st
}

func (s *Subscriber) update(f func(*Stats)) {
	s.statsMu.Lock()
	f(&s.stats)
	s.statsMu.Unlock()
}

// Run connects to the engine and applies its events until ctx is done, reconnecting with bounded
// exponential backoff whenever the connection fails or drops. It returns nil when ctx is done, after
// every goroutine it started has returned, or ErrAlreadyRunning.
func (s *Subscriber) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("subscriber %s: %w", s.cfg.Key(), ErrAlreadyRunning)
	}
	defer s.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	q := make(chan applyItem, s.cfg.QueueSize)
	s.statsMu.Lock()
	s.queue = q
	s.statsMu.Unlock()
	s.st = stream{} // every run starts a new epoch at its first message

	applied := make(chan struct{})
	go func() {
		defer close(applied)
		s.applyLoop(ctx, q)
	}()
	s.readLoop(ctx, q)
	cancel()
	<-applied

	s.statsMu.Lock()
	s.queue = nil
	s.stats.Connected = false
	s.statsMu.Unlock()
	return nil
}

// readLoop runs sessions until ctx is done, backing off between them.
func (s *Subscriber) readLoop(ctx context.Context, q chan<- applyItem) {
	bo := newBackoff(s.cfg.ReconnectMin, s.cfg.ReconnectMax)
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			s.update(func(st *Stats) { st.Reconnects++ })
		}
		received, err := s.session(ctx, q)
		if ctx.Err() != nil {
			return
		}
		if received {
			bo.reset()
		}
		d := bo.next()
		s.cfg.Logger.Warn("ingest: engine connection lost, reconnecting",
			"stream", s.cfg.Key().String(), "endpoint", s.cfg.Endpoint, "err", err, "backoff", d)
		if !sleepCtx(ctx, d) {
			return
		}
	}
}

// session connects once and reads until the connection fails or ctx is done. It reports whether any
// message arrived (a healthy connection resets the backoff).
func (s *Subscriber) session(ctx context.Context, q chan<- applyItem) (received bool, err error) {
	sub := zmq4.NewSub(s.limitCtx(ctx), zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(s.cfg.DialTimeout),
		zmq4.WithLogger(s.zlog))
	// Before Dial: zmq4 sends the subscription as soon as the connection is up.
	if err := sub.SetOption(zmq4.OptionSubscribe, s.cfg.Topic); err != nil {
		closeSocket(sub)
		return false, fmt.Errorf("ingest: subscribe: %w", err)
	}
	if err := sub.Dial(limitedEndpoint(s.cfg.Endpoint)); err != nil {
		closeSocket(sub)
		return false, fmt.Errorf("ingest: connect %s: %w", s.cfg.Endpoint, err)
	}
	s.update(func(st *Stats) { st.Connected = true })
	defer s.update(func(st *Stats) { st.Connected = false })
	// Messages may have been lost while disconnected, or the engine may have restarted: the next
	// message is checked against the replay buffer — and the restart probe checks at once, in case
	// the engine stays silent.
	s.st.verify = s.st.has
	msgs, stop := recvLoop(sub)
	defer stop()
	probe := s.cfg.RestartProbeInterval > 0 && s.cfg.ReplayEndpoint != ""
	idle := time.NewTimer(0) // fires at once: probe right after (re)connecting
	if !probe {
		idle.Stop()
	}
	defer idle.Stop()
	for {
		select {
		case r := <-msgs:
			if r.err != nil {
				return received, fmt.Errorf("ingest: receive from %s: %w", s.cfg.Endpoint, r.err)
			}
			received = true
			if err := s.handleFrames(ctx, r.msg.Frames, q); err != nil {
				return received, err
			}
			if probe {
				idle.Reset(s.cfg.RestartProbeInterval)
			}
		case <-idle.C:
			if err := s.probeRestart(ctx, q); err != nil {
				return received, err
			}
			idle.Reset(s.cfg.RestartProbeInterval)
		case <-ctx.Done():
			return received, ctx.Err()
		}
	}
}

type recvResult struct {
	msg zmq4.Msg
	err error
}

// recvLoop receives from sock on its own goroutine (a zmq4 Recv cannot be bounded or interleaved
// with a timer) until an error; stop closes sock and waits for the goroutine.
func recvLoop(sock zmq4.Socket) (<-chan recvResult, func()) {
	out, done, exited := make(chan recvResult), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		for {
			msg, err := sock.Recv()
			select {
			case out <- recvResult{msg, err}:
			case <-done:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return out, func() {
		close(done)
		closeSocket(sock)
		<-exited
	}
}

// handleFrames takes one live multipart message [topic, seq, payload].
func (s *Subscriber) handleFrames(ctx context.Context, frames [][]byte, q chan<- applyItem) error {
	s.update(func(st *Stats) { st.Messages++ })
	if len(frames) != 3 || len(frames[1]) != 8 {
		// Without a sequence number the message cannot be placed; if it was real, the next one shows
		// a gap and the replay recovers it.
		s.malformed(fmt.Errorf("%d frames, want [topic, seq(8 bytes), payload]", len(frames)))
		return nil
	}
	return s.handleLive(ctx, binary.BigEndian.Uint64(frames[1]), frames[2], q)
}

// limitCtx returns ctx carrying the stream's frame limit for the sockets made with it: a peer breaking
// it is counted here (from zmq4's reader goroutine) and its connection ends.
func (s *Subscriber) limitCtx(ctx context.Context) context.Context {
	return withFrameLimit(ctx, frameLimit{maxMessage: uint64(s.cfg.MaxMessageBytes), exceeded: func(err error) {
		s.update(func(st *Stats) { st.Oversized++ })
		s.malformed(err)
	}})
}

// malformed counts a message that did not decode, logging at powers of two so a bad engine cannot
// flood the log.
func (s *Subscriber) malformed(err error) {
	var n uint64
	s.update(func(st *Stats) { st.Malformed++; n = st.Malformed })
	if n&(n-1) == 0 {
		s.cfg.Logger.Warn("ingest: malformed KV event message dropped",
			"stream", s.cfg.Key().String(), "count", n, "err", err)
	}
}
