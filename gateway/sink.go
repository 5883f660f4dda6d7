package gateway

import "net/http"

// Request is one gateway call, independent of the transport (fasthttp, a Lambda streaming invocation).
type Request struct {
	Method string
	// Path is the request path without the query ("/v1/chat/completions").
	Path string
	// Header returns a request header value, case-insensitively ("" when absent). Nil: no headers.
	Header func(name string) string
	// Body is the request body; the gateway does not keep it after Serve returns.
	Body []byte
	// RemoteAddr names the client for logs ("" when unknown).
	RemoteAddr string
}

// Sink receives a gateway answer. The fasthttp server's stream writer and the Lambda streaming response
// implement it; both pass each chunk to the client as soon as Write returns.
type Sink interface {
	// Start sends the status line and headers. It is called exactly once, before any Write.
	Start(status int, header http.Header) error
	// Write sends one chunk and flushes it to the client. An error means the client is gone: the gateway
	// stops, closes the upstream request and releases the request's load at once.
	Write(p []byte) error
}
