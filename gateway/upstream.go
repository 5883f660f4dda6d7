package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"
)

// upstream is the pooled HTTP client of one worker URL.
type upstream struct {
	hc *fasthttp.HostClient
	// base is the URL's scheme://host[:port] plus its path prefix without the trailing '/': the request
	// path is appended to it.
	base     string
	lastUsed time.Time
}

// upstreams holds one fasthttp.HostClient per worker URL (pooled keep-alive connections, at most
// MaxConnsPerWorker each). Clients unused for upstreamIdleEvict are dropped when the map grows, so a
// churning fleet does not grow it forever.
type upstreams struct {
	opts Options

	mu        sync.Mutex
	byURL     map[string]*upstream
	lastSweep int
}

const upstreamIdleEvict = 10 * time.Minute

func newUpstreams(opts Options) *upstreams {
	return &upstreams{opts: opts, byURL: map[string]*upstream{}}
}

// get returns the client of a worker URL, creating it on first use.
func (u *upstreams) get(rawURL string) (*upstream, error) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if c, ok := u.byURL[rawURL]; ok {
		c.lastUsed = now
		return c, nil
	}
	pu, err := url.Parse(rawURL)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return nil, fmt.Errorf("worker url %q: want http://host:port or https://host:port", rawURL)
	}
	addr := pu.Host
	if pu.Port() == "" {
		if pu.Scheme == "https" {
			addr = net.JoinHostPort(pu.Hostname(), "443")
		} else {
			addr = net.JoinHostPort(pu.Hostname(), "80")
		}
	}
	idle, connect := u.opts.IdleTimeout, u.opts.ConnectTimeout
	c := &upstream{base: pu.Scheme + "://" + pu.Host + strings.TrimSuffix(pu.Path, "/"), lastUsed: now}
	c.hc = &fasthttp.HostClient{
		Addr:  addr,
		IsTLS: pu.Scheme == "https",
		Dial: func(addr string) (net.Conn, error) {
			conn, err := net.DialTimeout("tcp", addr, connect)
			if err != nil {
				return nil, &dialError{err}
			}
			return &idleConn{Conn: conn, idle: idle}, nil
		},
		MaxConns:           u.opts.MaxConnsPerWorker,
		MaxConnWaitTimeout: connect,
		// No ReadTimeout/WriteTimeout: they would bound a whole stream (NOTES, fasthttp). idleConn bounds
		// each read and write instead.
		StreamResponseBody:            true,
		DisableHeaderNamesNormalizing: false,
		NoDefaultUserAgentHeader:      true,
		// POSTs are never retried by fasthttp itself: the gateway decides (SPEC §7.2).
		RetryIf: func(*fasthttp.Request) bool { return false },
	}
	u.byURL[rawURL] = c
	if len(u.byURL) > 2*u.lastSweep+64 {
		for k, v := range u.byURL {
			if now.Sub(v.lastUsed) > upstreamIdleEvict {
				delete(u.byURL, k)
			}
		}
		u.lastSweep = len(u.byURL)
	}
	return c, nil
}

// dialError marks a failure to connect: the request never reached the worker, so it is safe to retry.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// idleConn bounds every read and write with the idle timeout (a deadline moved forward per call): the
// gateway's only timeout on a worker connection, so a long stream that keeps moving is never cut.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// classify names a transport error's reason: connect (safe to retry), timeout, or protocol.
func classify(err error) string {
	var de *dialError
	var ne net.Error
	switch {
	case errors.As(err, &de), errors.Is(err, fasthttp.ErrNoFreeConns), errors.Is(err, fasthttp.ErrConnectionClosed):
		// ErrConnectionClosed: a pooled keep-alive connection the worker had closed; the worker never
		// read the request.
		return reasonConnect
	case errors.Is(err, fasthttp.ErrTimeout), errors.As(err, &ne) && ne.Timeout():
		return reasonTimeout
	}
	return reasonProtocol
}

// hopByHop are the response headers a proxy must not pass on (RFC 9110 §7.6.1), plus Content-Length,
// which the transport sets for the body it actually sends.
var hopByHop = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Proxy-Connection": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Content-Length": true,
}

// forwardedRequestHeaders are the client headers passed to the worker. The client's Authorization is
// kvrouter's own token and is never forwarded; Accept-Encoding is not either (a compressed stream could not
// be flushed chunk by chunk).
var forwardedRequestHeaders = []string{"Content-Type", "Accept", "User-Agent", "X-Session-ID",
	"X-Dynamo-Session-ID", "Traceparent", "Tracestate", "OpenAI-Organization", "OpenAI-Project"}
