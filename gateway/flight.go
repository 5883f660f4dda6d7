package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// flight is one proxied request: its booking on the chosen worker and, while streaming, the worker's
// answer.
type flight struct {
	g        *Gateway
	pool     string
	start    time.Time
	known    bool          // token ids known (else load-only routing)
	leaseTTL time.Duration // the pool's lease TTL; 0 = no renewal

	dec   statestore.Decision
	renew *time.Timer
	mu    sync.Mutex // guards released against the renewal timer
	// released: the booking was released (done); the renewal timer must not renew it again.
	released bool

	resp *fasthttp.Response // the worker's streaming answer (Streaming responses only)
	sent time.Time          // when the request went to the worker

	// end is the bookkeeping left for Finish (release and health report of a successful answer).
	end     func()
	endOnce sync.Once
}

// finish runs the bookkeeping left for Finish, once.
func (f *flight) finish() {
	f.endOnce.Do(func() {
		if f.end != nil {
			f.end()
		}
	})
}

// succeeded releases the load and reports a healthy worker.
func (f *flight) succeeded() {
	f.release()
	f.report(true)
}

// run routes and forwards, routing again without the failed worker after a connect failure or a 429/503
// answered before any byte reached the client, at most Retries times (SPEC §7.2).
func (f *flight) run(ctx context.Context, req Request, in core.RouteInput) *Response {
	g := f.g
	var excluded []string
	var last *Response
	for attempt := 0; ; attempt++ {
		in.ExcludedWorkers = excluded
		in.RequestID = ""
		sctx, cancel := context.WithTimeout(ctx, g.opts.StoreTimeout)
		d, err := g.rt.Route(sctx, in)
		cancel()
		if err != nil {
			if last != nil && errors.Is(err, statestore.ErrNoEligibleWorker) {
				// Every worker left was tried: answer with the last failure rather than "no worker".
				return g.done(f.pool, last)
			}
			return g.done(f.pool, storeErrorResponse(err))
		}
		f.book(d)
		resp, retryReason := f.forward(ctx, req)
		if retryReason == "" || attempt >= g.opts.Retries {
			return g.done(f.pool, resp)
		}
		g.m.retry(f.pool, retryReason)
		g.log.Debug("gateway: retrying on another worker", "pool", f.pool, "worker", d.WorkerID,
			"reason", retryReason, "attempt", attempt+1)
		last = resp
		excluded = append(excluded, d.WorkerID)
	}
}

// book holds a new decision and arms the lease renewal: a request running longer than half the lease TTL
// renews its lease, so the load is never released under a live stream.
func (f *flight) book(d statestore.Decision) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dec, f.released = d, false
	if f.leaseTTL <= 0 {
		return
	}
	half := f.leaseTTL / 2
	id := d.RequestID
	var tick func()
	tick = func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.released || f.dec.RequestID != id || f.leaseTTL == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), f.g.opts.StoreTimeout)
		_, err := f.g.rt.RenewLease(ctx, f.pool, id)
		cancel()
		if err != nil {
			f.g.log.Warn("gateway: lease renewal failed", "pool", f.pool, "request_id", id, "err", err)
		}
		f.renew = time.AfterFunc(half, tick)
	}
	f.renew = time.AfterFunc(half, tick)
}

// stopRenewal stops renewing the lease: the worker has finished the request, so nothing may keep the
// lease alive any more, not even a caller that never calls Finish.
func (f *flight) stopRenewal() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.renew != nil {
		f.renew.Stop()
	}
	f.leaseTTL = 0
}

// release ends the booking (done through core.Router.Release: carried by the router's next route of the
// pool within --release-delay, or sent alone), so the load never waits for the lease TTL.
func (f *flight) release() {
	f.mu.Lock()
	if f.released {
		f.mu.Unlock()
		return
	}
	f.released = true
	if f.renew != nil {
		f.renew.Stop()
	}
	id := f.dec.RequestID
	f.mu.Unlock()
	f.g.rt.Release(f.pool, id) // coalesced onto the router's next route of the pool (core.Options.ReleaseDelay)
}

// report records the forward's outcome in the shared worker health (SPEC §7.2). Successes are reported
// in the background: they only reset a failure count and must not delay the answer.
func (f *flight) report(ok bool) {
	worker := f.dec.WorkerID
	do := func() {
		ctx, cancel := context.WithTimeout(context.Background(), f.g.opts.StoreTimeout)
		defer cancel()
		if _, err := f.g.rt.ReportForward(ctx, f.pool, worker, ok); err != nil {
			f.g.log.Debug("gateway: health report failed", "pool", f.pool, "worker", worker, "err", err)
		}
	}
	if ok {
		go do()
		return
	}
	do()
}

// forward sends the request to the booked worker and waits for the answer's head. It returns the answer
// (streaming, or complete) and, for a failure that may be retried elsewhere, its reason; the booking is
// then already released.
func (f *flight) forward(ctx context.Context, req Request) (*Response, string) {
	g, d := f.g, f.dec
	up, err := g.ups.get(d.URL)
	if err != nil {
		f.fail(reasonConnect)
		return f.errorAnswer(http.StatusBadGateway, CodeUpstreamConnect, fmt.Sprintf("worker %s: %v", d.WorkerID, err)), reasonConnect
	}
	freq := fasthttp.AcquireRequest()
	freq.Header.SetMethod(http.MethodPost)
	freq.SetRequestURI(up.base + req.Path)
	for _, h := range forwardedRequestHeaders {
		if v := header(req, h); v != "" {
			freq.Header.Set(h, v)
		}
	}
	if len(freq.Header.ContentType()) == 0 {
		freq.Header.SetContentType("application/json")
	}
	// vLLM takes X-Request-Id as its request id: engine logs then name kvrouter's id.
	freq.Header.Set("X-Request-Id", d.RequestID)
	freq.SetBodyRaw(req.Body)
	resp := fasthttp.AcquireResponse()
	f.sent = time.Now()
	err = up.hc.Do(freq, resp)
	fasthttp.ReleaseRequest(freq)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		reason := classify(err)
		f.fail(reason)
		switch reason {
		case reasonConnect:
			return f.errorAnswer(http.StatusBadGateway, CodeUpstreamConnect, fmt.Sprintf("worker %s: %v", d.WorkerID, err)), reasonConnect
		case reasonTimeout:
			return f.errorAnswer(http.StatusGatewayTimeout, CodeUpstreamTimeout,
				fmt.Sprintf("worker %s sent nothing within the idle timeout (%s)", d.WorkerID, g.opts.IdleTimeout)), ""
		}
		return f.errorAnswer(http.StatusBadGateway, CodeUpstreamError, fmt.Sprintf("worker %s: %v", d.WorkerID, err)), ""
	}
	status := resp.StatusCode()
	hdr := f.headers(resp)
	if status == http.StatusOK && bytes.HasPrefix(resp.Header.ContentType(), []byte("text/event-stream")) {
		f.resp = resp
		return &Response{Status: status, Header: hdr, fl: f, stream: true}, ""
	}
	body, rerr := readBody(resp, g.opts.MaxResponseBytes)
	fasthttp.ReleaseResponse(resp)
	if rerr != nil {
		reason := classify(rerr)
		f.fail(reason)
		if reason == reasonTimeout {
			return f.errorAnswer(http.StatusGatewayTimeout, CodeUpstreamTimeout,
				fmt.Sprintf("worker %s: no byte within the idle timeout (%s)", d.WorkerID, g.opts.IdleTimeout)), ""
		}
		code := CodeUpstreamError
		if errors.Is(rerr, errTooLarge) {
			code = CodeUpstreamTooLarge
		}
		return f.errorAnswer(http.StatusBadGateway, code, fmt.Sprintf("worker %s: %v", d.WorkerID, rerr)), ""
	}
	g.m.firstToken(f.pool, time.Since(f.start))
	g.m.upstream(f.pool, time.Since(f.sent))
	ans := &Response{Status: status, Header: hdr, Body: body}
	switch {
	case status == http.StatusTooManyRequests:
		// Saturated, not broken: retried elsewhere without a health failure.
		g.m.failure(f.pool, d.WorkerID, reason429)
		f.release()
		return ans, reason429
	case status == http.StatusServiceUnavailable:
		f.fail(reason503)
		return ans, reason503
	case status >= 500:
		f.fail(reason5xx)
		return ans, ""
	}
	// Released by Finish, once the answer is on its way: the store round trip of done stays off the
	// client's latency.
	f.stopRenewal()
	f.end = f.succeeded
	ans.fl = f
	return ans, ""
}

// fail releases the booking, counts the failure and reports it to the shared health.
func (f *flight) fail(reason string) {
	f.g.m.failure(f.pool, f.dec.WorkerID, reason)
	f.g.log.Debug("gateway: forward failed", "pool", f.pool, "worker", f.dec.WorkerID, "reason", reason)
	f.release()
	f.report(false)
}

// headers are the worker's answer headers without hop-by-hop ones, plus the gateway's.
func (f *flight) headers(resp *fasthttp.Response) http.Header {
	h := http.Header{}
	for k, v := range resp.Header.All() {
		key := http.CanonicalHeaderKey(string(k))
		if !hopByHop[key] {
			h.Add(key, string(v))
		}
	}
	f.addHeaders(h)
	return h
}

func (f *flight) addHeaders(h http.Header) {
	h.Set(HeaderRequestID, f.dec.RequestID)
	h.Set(HeaderWorker, f.dec.WorkerID)
	h.Set(HeaderOverlapBlocks, strconv.Itoa(f.dec.OverlapBlocks))
	if !f.known {
		h.Set(HeaderOverlap, "unknown")
	}
}

// errorAnswer is the gateway's own error answer for a forward, with the routing headers.
func (f *flight) errorAnswer(status int, code, msg string) *Response {
	r := errorResponse(status, typeServer, code, msg)
	f.addHeaders(r.Header)
	return r
}

var errTooLarge = errors.New("answer larger than proxy-max-response-bytes")

// readBody reads a complete (non-streaming) answer of at most max bytes.
func readBody(resp *fasthttp.Response, max int) ([]byte, error) {
	rd := resp.BodyStream()
	if rd == nil {
		return append([]byte(nil), resp.Body()...), nil
	}
	defer resp.CloseBodyStream()
	b, err := io.ReadAll(io.LimitReader(rd, int64(max)+1))
	if err != nil {
		return nil, err
	}
	if len(b) > max {
		return nil, errTooLarge
	}
	return b, nil
}

// streamBufs recycles stream read buffers.
var streamBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// stream copies the worker's stream to w. Each read is written and flushed at once; the first data
// chunk marks prefill done; the end, a worker failure or a client failure releases the booking.
func (f *flight) stream(w ChunkWriter) {
	g := f.g
	resp := f.resp
	f.resp = nil
	body := resp.BodyStream()
	bp := streamBufs.Get().(*[]byte)
	buf := *bp
	status := http.StatusOK
	first := true
	var tail [2]byte // the last two bytes sent, to end an event cut in the middle before an error event
	for body != nil {
		n, err := body.Read(buf)
		if n > 0 {
			if werr := w.Write(buf[:n]); werr != nil {
				status = StatusClientGone
				break
			}
			if first {
				first = false
				g.m.firstToken(f.pool, time.Since(f.start))
				go f.prefillDone()
			}
			if n >= 2 {
				tail = [2]byte{buf[n-2], buf[n-1]}
			} else {
				tail = [2]byte{tail[1], buf[0]}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			reason := reasonMidStream
			msg := fmt.Sprintf("worker %s failed mid-stream: %v", f.dec.WorkerID, err)
			if classify(err) == reasonTimeout {
				reason = reasonTimeout
				msg = fmt.Sprintf("worker %s sent nothing within the idle timeout (%s)", f.dec.WorkerID, g.opts.IdleTimeout)
			}
			var ev []byte
			if tail != [2]byte{'\n', '\n'} && !first {
				ev = append(ev, "\n\n"...)
			}
			ev = append(ev, sseError(CodeUpstreamError, msg)...)
			_ = w.Write(ev)
			status = http.StatusBadGateway
			// The worker is gone: close its connection before releasing the load.
			resp.CloseBodyStream()
			f.fail(reason)
			break
		}
	}
	streamBufs.Put(bp)
	// Before EOF this closes the worker connection: the engine sees the client leave and stops generating.
	resp.CloseBodyStream()
	fasthttp.ReleaseResponse(resp)
	g.m.upstream(f.pool, time.Since(f.sent))
	g.m.request(f.pool, status)
	switch status {
	case http.StatusOK:
		f.stopRenewal()
		f.end = f.succeeded // Finish: after the end of the stream went out
	case StatusClientGone:
		f.release()
	}
}

// prefillDone marks the booking's prefill finished (the first token arrived).
func (f *flight) prefillDone() {
	f.mu.Lock()
	released, id := f.released, f.dec.RequestID
	f.mu.Unlock()
	if released {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), f.g.opts.StoreTimeout)
	defer cancel()
	if _, err := f.g.rt.PrefillDone(ctx, f.pool, id); err != nil {
		f.g.log.Debug("gateway: prefill_done failed", "pool", f.pool, "request_id", id, "err", err)
	}
}

// abort releases a streaming answer that will never be sent.
func (f *flight) abort() {
	if f.resp != nil {
		f.resp.CloseBodyStream()
		fasthttp.ReleaseResponse(f.resp)
		f.resp = nil
	}
	f.g.m.request(f.pool, StatusClientGone)
	f.release()
}
