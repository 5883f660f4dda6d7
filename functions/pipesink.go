package functions

import (
	"errors"
	"io"
	"net/http"
)

// head is a response's status and headers.
type head struct {
	status int
	header http.Header
}

// pipeSink is the gateway.Sink of a streamed invocation: Start hands the head to the waiting handler,
// Write passes each chunk through a pipe whose reader is the streaming response's body. io.Pipe has no
// buffer, so Write returns only once the Lambda runtime has read the whole chunk into the HTTP request
// that streams it to the Runtime API (chunked, flushed per write); an error means the runtime stopped
// reading (the response was closed), i.e. nobody will see the rest.
//
// Start and Write are called by the core's goroutine only (Sink's contract), so headSent needs no lock;
// the handler reads it after Serve returned.
type pipeSink struct {
	r        *io.PipeReader
	w        *io.PipeWriter
	started  chan head // capacity 1: Start never blocks
	headSent bool
}

func newPipeSink() *pipeSink {
	r, w := io.Pipe()
	return &pipeSink{r: r, w: w, started: make(chan head, 1)}
}

var (
	errStartedTwice = errors.New("functions: gateway: response started twice")
	errNotStarted   = errors.New("functions: gateway: write before the response started")
)

// Start implements gateway.Sink.
func (s *pipeSink) Start(status int, header http.Header) error {
	if s.headSent {
		return errStartedTwice
	}
	s.headSent = true
	s.started <- head{status: status, header: header.Clone()}
	return nil
}

// Write implements gateway.Sink.
func (s *pipeSink) Write(p []byte) error {
	if !s.headSent {
		return errNotStarted
	}
	if len(p) == 0 {
		return nil
	}
	_, err := s.w.Write(p)
	return err
}
