package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// endSeq marks the end of a replay answer: -1 as a signed 64-bit integer, big-endian.
const endSeq = ^uint64(0)

// errReplayTimeout: the engine did not answer a replay request in time.
var errReplayTimeout = errors.New("replay timed out")

// replay asks the engine's ROUTER replay socket for its buffered messages from start on, as vLLM's
// ZmqEventPublisher serves them: a DEALER sends [empty, start u64 BE] and receives [empty, seq u64 BE,
// payload] per buffered message with seq >= start, oldest first, then [empty, endSeq, empty]. fn is
// called for each message until it returns false or the end marker arrives. Each frame (and the
// connect) must arrive within ReplayTimeout.
func (s *Subscriber) replay(ctx context.Context, start uint64, fn func(seq uint64, payload []byte) bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	timeout := s.cfg.ReplayTimeout
	var timedOut atomic.Bool
	// Cancelling the socket's context is the only way to bound a zmq4 Recv.
	timer := time.AfterFunc(timeout, func() { timedOut.Store(true); cancel() })
	defer timer.Stop()

	d := zmq4.NewDealer(s.limitCtx(ctx), zmq4.WithDialerMaxRetries(0), zmq4.WithDialerTimeout(timeout),
		zmq4.WithTimeout(timeout), zmq4.WithLogger(s.zlog))
	defer closeSocket(d)
	wrap := func(err error) error {
		if timedOut.Load() {
			err = errReplayTimeout
		}
		return fmt.Errorf("ingest: replay from seq %d via %s: %w", start, s.cfg.ReplayEndpoint, err)
	}
	if err := d.Dial(limitedEndpoint(s.cfg.ReplayEndpoint)); err != nil {
		return wrap(err)
	}
	if err := d.Send(zmq4.NewMsgFrom(nil, be64(start))); err != nil {
		return wrap(err)
	}
	for {
		timer.Reset(timeout)
		msg, err := d.Recv()
		if err != nil {
			return wrap(err)
		}
		frames := msg.Frames
		if len(frames) == 3 && len(frames[0]) == 0 {
			frames = frames[1:] // the empty delimiter the ROUTER echoes to a DEALER
		}
		if len(frames) != 2 || len(frames[0]) != 8 {
			return wrap(fmt.Errorf("bad answer: %d frames", len(msg.Frames)))
		}
		seq := binary.BigEndian.Uint64(frames[0])
		if seq == endSeq || !fn(seq, frames[1]) {
			return nil
		}
	}
}
