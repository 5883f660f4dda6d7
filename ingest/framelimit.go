package ingest

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/transport"
)

// Bounding what an engine can make the ingest allocate.
//
// zmq4 (v0.17.0, conn.go (*Conn).read) allocates each frame's body as `make([]byte, size)` from the
// size the peer declares in the frame header, before reading a byte of it: a peer declaring 2^62
// bytes crashes the process (makeslice panics in zmq4's reader goroutine, which nobody can recover),
// and one declaring a few GiB allocates them. zmq4 offers no limit option, but it dials through a
// registered transport with the socket's context. So the ingest dials engines through its own
// transports ("kvrouter-tcp", "kvrouter-ipc"), which wrap the net.Conn in a frameLimitConn: it follows
// the ZMTP 3.x framing of the bytes zmq4 reads (64-byte greeting, then frames: flags, 1- or 8-byte
// size, body) and fails the read that would complete a header declaring more than the stream's limit —
// before zmq4 sees the size. zmq4 then ends that connection; the subscriber counts it (Stats.Oversized,
// Malformed) and reconnects with backoff. Other streams have their own connections and are unaffected.
// Forking zmq4's reader was rejected: the wrapper is ~100 lines against a documented wire format and
// survives zmq4 upgrades that keep the transport interface.

// limitedTransports maps the engine endpoint schemes to the wrapping transports' names.
var limitedTransports = map[string]string{"tcp": "kvrouter-tcp", "ipc": "kvrouter-ipc"}

func init() {
	nets := map[string]string{"tcp": "tcp", "ipc": "unix"}
	for scheme, name := range limitedTransports {
		if err := zmq4.RegisterTransport(name, limitedTransport{inner: transport.New(nets[scheme])}); err != nil {
			panic(fmt.Sprintf("ingest: register zmq4 transport %q: %v", name, err))
		}
	}
}

// limitedEndpoint rewrites tcp://… and ipc://… to the frame-limited transports.
func limitedEndpoint(ep string) string {
	scheme, rest, ok := strings.Cut(ep, "://")
	if name, known := limitedTransports[scheme]; ok && known {
		return name + "://" + rest
	}
	return ep
}

// maxFramesPerMessage bounds the frames of one multipart message: vLLM and SGLang send 3 ([topic,
// seq, payload]), a replay answer 3 or 4, ZMTP commands 1. Without it, a message of empty frames
// (2 wire bytes each) would cost zmq4 a 24-byte slice header per frame, 12 times the wire size.
const maxFramesPerMessage = 16

// zmtpGreetingLen is the fixed length of a ZMTP 3.x greeting.
const zmtpGreetingLen = 64

// frameLimit is one connection's bound, carried to the transport in the socket's context.
type frameLimit struct {
	// maxMessage bounds one message's wire bytes (every frame's header and body), and so every frame.
	maxMessage uint64
	// exceeded is called once per connection that broke the bound, from zmq4's reader goroutine.
	exceeded func(error)
}

type frameLimitKey struct{}

// withFrameLimit returns ctx carrying lim for the sockets created with it.
func withFrameLimit(ctx context.Context, lim frameLimit) context.Context {
	return context.WithValue(ctx, frameLimitKey{}, lim)
}

// frameLimitError is the read error of a connection whose peer declared a frame or message beyond
// the limit. It is a net.Error (not a timeout), so zmq4 marks the connection closed.
type frameLimitError struct {
	Declared uint64 // bytes the frame header declared
	Frames   int    // frames of the message so far, including this one
	Limit    uint64 // the message bound, bytes
}

func (e *frameLimitError) Error() string {
	if e.Frames > maxFramesPerMessage {
		return fmt.Sprintf("ingest: ZMQ message has more than %d frames", maxFramesPerMessage)
	}
	return fmt.Sprintf("ingest: ZMQ frame declares %d bytes, beyond the %d-byte message limit", e.Declared, e.Limit)
}

// Timeout and Temporary make frameLimitError a permanent net.Error.
func (e *frameLimitError) Timeout() bool   { return false }
func (e *frameLimitError) Temporary() bool { return false }

// limitedTransport dials like zmq4's net transport and wraps the connection.
type limitedTransport struct{ inner transport.Transport }

func (t limitedTransport) Dial(ctx context.Context, d transport.Dialer, addr string) (net.Conn, error) {
	c, err := t.inner.Dial(ctx, d, addr)
	if err != nil {
		return nil, err
	}
	lim, ok := ctx.Value(frameLimitKey{}).(frameLimit)
	if !ok || lim.maxMessage == 0 {
		lim.maxMessage = DefaultMaxMessageBytes
	}
	return &frameLimitConn{Conn: c, lim: lim, greeting: zmtpGreetingLen}, nil
}

func (t limitedTransport) Listen(ctx context.Context, addr string) (net.Listener, error) {
	return t.inner.Listen(ctx, addr)
}

func (t limitedTransport) Addr(ep string) (string, error) { return t.inner.Addr(ep) }

// frameLimitConn follows the ZMTP framing of the bytes read through it. Reads come from one zmq4
// goroutine at a time (handshake, then the connection's reader), so it needs no lock.
type frameLimitConn struct {
	net.Conn
	lim frameLimit
	err error // sticky: once the bound is broken every read fails

	greeting int    // greeting bytes still to pass
	hdr      []byte // the current frame header read so far (flags first)
	hdrLen   int    // its full length once the flags are known (2 or 9), 0 before
	body     uint64 // body bytes of the current frame still to pass
	msgBytes uint64 // wire bytes of the current message so far
	frames   int    // frames of the current message so far
	more     bool   // the current frame has the MORE flag
}

func (c *frameLimitConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(p)
	if i, bad := c.scan(p[:n]); bad != nil {
		c.err = bad
		if c.lim.exceeded != nil {
			c.lim.exceeded(bad)
		}
		return i, bad // the bytes before the one completing the bad header: zmq4 never sees its size
	}
	return n, err
}

// scan advances the framing state over b; on a broken bound it returns the index of the byte that
// completed the offending header, and the error.
func (c *frameLimitConn) scan(b []byte) (int, error) {
	for i := 0; i < len(b); {
		switch {
		case c.greeting > 0:
			k := min(c.greeting, len(b)-i)
			c.greeting -= k
			i += k
		case c.body > 0:
			k := uint64(len(b) - i)
			k = min(k, c.body)
			c.body -= k
			i += int(k)
			if c.body == 0 {
				c.endFrame()
			}
		default: // in a frame header
			c.hdr = append(c.hdr, b[i])
			if len(c.hdr) == 1 {
				const flagMore, flagLong = 0x01, 0x02
				c.more = b[i]&flagMore != 0
				c.hdrLen = 2
				if b[i]&flagLong != 0 {
					c.hdrLen = 9
				}
				c.frames++
				if c.frames > maxFramesPerMessage {
					return i, &frameLimitError{Frames: c.frames, Limit: c.lim.maxMessage}
				}
			}
			if len(c.hdr) == c.hdrLen {
				var size uint64
				for _, x := range c.hdr[1:] {
					size = size<<8 | uint64(x)
				}
				c.msgBytes += uint64(c.hdrLen)
				if size > c.lim.maxMessage || c.msgBytes+size > c.lim.maxMessage {
					return i, &frameLimitError{Declared: size, Frames: c.frames, Limit: c.lim.maxMessage}
				}
				c.msgBytes += size
				c.hdr, c.body = c.hdr[:0], size
				if size == 0 {
					c.endFrame()
				}
			}
			i++
		}
	}
	return len(b), nil
}

// endFrame closes the current frame; a frame without MORE ends its message.
func (c *frameLimitConn) endFrame() {
	if !c.more {
		c.msgBytes, c.frames = 0, 0
	}
}
