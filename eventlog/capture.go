package eventlog

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// CaptureWriter writes captured ZMQ messages as capture lines of an event log (see the package doc).
// It is safe for concurrent use by several subscribers.
type CaptureWriter struct {
	mu    sync.Mutex
	w     io.Writer
	lines int64
	err   error
}

// NewCaptureWriter returns a writer of capture lines to w.
func NewCaptureWriter(w io.Writer) *CaptureWriter { return &CaptureWriter{w: w} }

// Hook returns the ingest.SubscriberConfig.Capture function of one endpoint: worker and the endpoint's
// dp rank. After the first write error it writes nothing more (Err reports it).
func (c *CaptureWriter) Hook(worker string, dpRank int) func(seq uint64, payload []byte) {
	return func(seq uint64, payload []byte) {
		line, err := json.Marshal(Capture{WorkerID: worker, DPRank: dpRank, Seq: seq, Payload: payload})
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.err != nil {
			return
		}
		if err == nil {
			_, err = c.w.Write(append(line, '\n'))
		}
		if err != nil {
			c.err = fmt.Errorf("capture: %w", err)
			return
		}
		c.lines++
	}
}

// Lines counts the messages written.
func (c *CaptureWriter) Lines() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lines
}

// Err is the first write error, nil if none.
func (c *CaptureWriter) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}
