package zmqpub

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/kvrouter/kvrouter/ingest/vllmwire"
)

// ErrClosed is returned by operations on a publisher that is not started or already closed.
var ErrClosed = errors.New("zmqpub: publisher not running")

// EndSeq is the sequence number that ends a replay answer (-1 as a signed 64-bit integer).
const EndSeq = ^uint64(0)

// Publisher publishes vLLM KV event payloads. Safe for concurrent use.
type Publisher struct {
	opts Options

	mu      sync.Mutex // orders sequence numbers, buffer appends and sends
	running bool
	nextSeq uint64
	buf     *ring
	pub     zmq4.Socket
	router  zmq4.Socket
	done    chan struct{} // closed when the replay server has returned
}

// New validates opts; it opens no socket (Start does).
func New(opts Options) (*Publisher, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	return &Publisher{opts: opts, buf: newRing(opts.BufferSteps)}, nil
}

// Start binds the PUB socket (and the replay ROUTER socket) and serves replay requests until Close
// or ctx is done. Sequence numbers start at 0.
func (p *Publisher) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running {
		return errors.New("zmqpub: start: already started")
	}
	logger := slog.NewLogLogger(p.opts.Logger.Handler(), slog.LevelDebug)
	pub := zmq4.NewPub(ctx, zmq4.WithLogger(logger))
	if err := pub.SetOption(zmq4.OptionHWM, p.opts.HWM); err != nil {
		pub.Close()
		return fmt.Errorf("zmqpub: start: set hwm: %w", err)
	}
	if err := pub.Listen(p.opts.Endpoint); err != nil {
		pub.Close()
		return fmt.Errorf("zmqpub: start: %w", err)
	}
	p.pub, p.done = pub, make(chan struct{})
	if p.opts.ReplayEndpoint != "" {
		router := zmq4.NewRouter(ctx, zmq4.WithLogger(logger))
		if err := router.Listen(p.opts.ReplayEndpoint); err != nil {
			router.Close()
			pub.Close()
			return fmt.Errorf("zmqpub: start replay: %w", err)
		}
		p.router = router
		go p.serveReplay(router, p.done)
	} else {
		close(p.done)
	}
	p.running = true
	return nil
}

// Addr is the PUB socket's bound address as a dialable endpoint ("tcp://127.0.0.1:40123"), or "".
func (p *Publisher) Addr() string { return endpointOf(p.pub) }

// ReplayAddr is the replay socket's bound address, or "" without one.
func (p *Publisher) ReplayAddr() string { return endpointOf(p.router) }

func endpointOf(s zmq4.Socket) string {
	if s == nil || s.Addr() == nil {
		return ""
	}
	return s.Addr().Network() + "://" + s.Addr().String()
}

// Publish assigns the next sequence number to payload, keeps it for replay and sends it. The
// payload must not be modified afterwards. Messages beyond the socket's HWM are dropped, as in vLLM.
func (p *Publisher) Publish(ctx context.Context, payload []byte) (seq uint64, err error) {
	return p.publish(ctx, payload, true)
}

// PublishLost is Publish without the send: the message takes its sequence number and can be
// replayed, but no subscriber receives it live (fault injection: a message lost on the wire).
func (p *Publisher) PublishLost(ctx context.Context, payload []byte) (seq uint64, err error) {
	return p.publish(ctx, payload, false)
}

// JumpTo makes seq the next sequence number (fault injection: an engine whose counter jumped — a bug or
// a hostile publisher). The numbers skipped were never published, so no replay holds them.
func (p *Publisher) JumpTo(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.nextSeq = seq
}

// PublishBatch encodes b with opts and publishes it.
func (p *Publisher) PublishBatch(ctx context.Context, b vllmwire.Batch, opts vllmwire.EncodeOptions) (uint64, error) {
	payload, err := vllmwire.Encode(b, opts)
	if err != nil {
		return 0, fmt.Errorf("zmqpub: publish: %w", err)
	}
	return p.Publish(ctx, payload)
}

func (p *Publisher) publish(ctx context.Context, payload []byte, send bool) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("zmqpub: publish: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.running {
		return 0, ErrClosed
	}
	seq := p.nextSeq
	p.nextSeq++
	// Buffer before sending, so a replay request racing this message cannot miss it.
	p.buf.push(seq, payload)
	if !send {
		return seq, nil
	}
	msg := zmq4.NewMsgFrom([]byte(p.opts.Topic), be64(seq), payload)
	if err := p.pub.Send(msg); err != nil {
		return seq, fmt.Errorf("zmqpub: publish seq %d: %w", seq, err)
	}
	return seq, nil
}

// WaitSubscribed blocks until at least one subscriber's subscription has reached the PUB socket, or
// ctx is done. Messages published before that are lost to the subscriber (ZMQ's slow joiner).
func (p *Publisher) WaitSubscribed(ctx context.Context) error {
	p.mu.Lock()
	pub := p.pub
	p.mu.Unlock()
	if pub == nil {
		return ErrClosed
	}
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for {
		if t, ok := pub.(zmq4.Topics); ok && len(t.Topics()) > 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("zmqpub: wait for a subscriber: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// Close closes both sockets and waits for the replay server to return. Idempotent.
func (p *Publisher) Close() error {
	p.mu.Lock()
	if !p.running {
		p.mu.Unlock()
		return nil
	}
	p.running = false
	err := p.pub.Close()
	if p.router != nil {
		if e := p.router.Close(); err == nil {
			err = e
		}
	}
	done := p.done
	p.mu.Unlock()
	<-done
	if err != nil {
		return fmt.Errorf("zmqpub: close: %w", err)
	}
	return nil
}

// serveReplay answers replay requests [identity, empty, start_seq] until the socket closes.
func (p *Publisher) serveReplay(router zmq4.Socket, done chan struct{}) {
	defer close(done)
	for {
		msg, err := router.Recv()
		if err != nil {
			return // closed
		}
		if len(msg.Frames) != 3 || len(msg.Frames[2]) != 8 {
			p.opts.Logger.Warn("zmqpub: invalid replay request", "frames", len(msg.Frames))
			continue
		}
		id, start := msg.Frames[0], binary.BigEndian.Uint64(msg.Frames[2])
		p.mu.Lock()
		seqs, payloads := p.buf.from(start)
		p.mu.Unlock()
		for i, seq := range seqs {
			if err := router.Send(zmq4.NewMsgFrom(id, nil, be64(seq), payloads[i])); err != nil {
				break // the requester went away
			}
		}
		_ = router.Send(zmq4.NewMsgFrom(id, nil, be64(EndSeq), nil))
	}
}

func be64(v uint64) []byte {
	return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v)
}
