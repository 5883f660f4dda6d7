package server

import (
	"bufio"
	"context"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/gateway"
)

// serveGateway adapts fasthttp to the gateway: the head is set in the handler, a streamed body is written
// by fasthttp's body stream writer, flushed chunk by chunk.
func (s *Server) serveGateway(ctx *fasthttp.RequestCtx) {
	req := gateway.Request{
		Method:     string(ctx.Method()),
		Path:       string(ctx.Path()),
		Header:     func(name string) string { return string(ctx.Request.Header.Peek(name)) },
		Body:       ctx.PostBody(),
		RemoteAddr: ctx.RemoteAddr().String(),
	}
	// Not ctx itself: fasthttp cancels it on shutdown, and in-flight requests must drain, not fail.
	r := s.opts.Gateway.Begin(context.Background(), req)
	ctx.SetStatusCode(r.Status)
	for k, vs := range r.Header {
		for _, v := range vs {
			ctx.Response.Header.Add(k, v)
		}
	}
	if !r.Streaming() {
		ctx.SetBody(r.Body)
		// The body is written after the handler returns; done need not wait for it (nor the client for
		// done's store round trip).
		go r.Finish()
		return
	}
	// Server.WriteTimeout would bound the whole streamed body (NOTES, fasthttp): a stream gets a write
	// deadline per chunk instead, WriteTimeout from each write. Setting one here tells fasthttp not to
	// apply its own for this response. The stream writer must not touch ctx (recycled once the handler
	// returns); the connection stays valid while fasthttp writes this response.
	idle := s.opts.WriteTimeout
	_ = ctx.SetWriteDeadline(time.Now().Add(idle))
	conn := ctx.Conn()
	ctx.SetBodyStreamWriter(func(w *bufio.Writer) {
		r.Stream(chunkWriter{w: w, conn: conn, idle: idle})
		go r.Finish() // the stream's end goes out when this returns, without waiting for done
	})
}

// chunkWriter writes and flushes one chunk per call; an error means the client is gone.
type chunkWriter struct {
	w    *bufio.Writer
	conn net.Conn
	idle time.Duration
}

func (c chunkWriter) Write(p []byte) error {
	if err := c.conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return err
	}
	if _, err := c.w.Write(p); err != nil {
		return err
	}
	return c.w.Flush()
}
