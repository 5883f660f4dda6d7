package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/ingest"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/statestore"
)

// MaxEventsPerMessage bounds the events of one captured message (count): event ids of a capture are
// seq*MaxEventsPerMessage + k, so they stay ordered across messages.
const MaxEventsPerMessage = 1 << 20

// maxLineBytes bounds one line of a log (bytes): a captured message of a long prompt is large.
const maxLineBytes = 64 << 20

// Capture is one captured ZMQ message (see the package doc).
type Capture struct {
	WorkerID string `json:"worker_id"`
	DPRank   int    `json:"dp_rank"`
	Seq      uint64 `json:"seq"`
	// Payload is the msgpack EventBatch, base64 in JSON.
	Payload []byte `json:"payload"`
}

// Batch is one worker's events from consecutive lines of a log.
type Batch = statestore.EventBatch

// Log is a parsed event log.
type Log struct {
	// Batches are the events in file order, grouped into runs of one worker.
	Batches []Batch
	// Events counts the store events read.
	Events int
	// Skipped lists lines whose event could not be used (line number: reason); they are not applied.
	Skipped []string
}

// Read parses a log for a pool of blockSize-token blocks (used to hash token ids of events that
// declare no block_size). Syntax errors are fatal and name the line; events that parse but cannot
// be converted (bad tier, bad worker id…) are listed in Log.Skipped.
func Read(r io.Reader, pool string, blockSize int) (*Log, error) {
	if blockSize < 1 {
		return nil, fmt.Errorf("block size %d: must be > 0", blockSize)
	}
	out := &Log{}
	streams := map[captureKey]*captureStream{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	add := func(worker string, evs []statestore.Event) {
		n := len(out.Batches)
		if n > 0 && out.Batches[n-1].WorkerID == worker {
			out.Batches[n-1].Events = append(out.Batches[n-1].Events, evs...)
		} else {
			out.Batches = append(out.Batches, Batch{Pool: pool, WorkerID: worker, Events: evs})
		}
		out.Events += len(evs)
	}
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		var probe struct {
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(b, &probe); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		if probe.Payload != nil {
			worker, evs, err := captureEvents(b, blockSize, streams)
			if err != nil {
				out.Skipped = append(out.Skipped, fmt.Sprintf("line %d: %v", line, err))
				continue
			}
			add(worker, evs)
			continue
		}
		var ev core.RouterEvent
		if err := json.Unmarshal(b, &ev); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		worker := string(ev.WorkerID)
		if err := statestore.CheckID("worker_id", worker); err != nil {
			out.Skipped = append(out.Skipped, fmt.Sprintf("line %d: %v", line, err))
			continue
		}
		se, err := ev.ToStore(blockSize)
		if err != nil {
			out.Skipped = append(out.Skipped, fmt.Sprintf("line %d: %v", line, err))
			continue
		}
		add(worker, []statestore.Event{se})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return out, nil
}

// captureKey names one captured endpoint.
type captureKey struct {
	worker string
	rank   int
}

// captureStream follows one endpoint's sequence numbers: a number lower than the last one means a new
// engine process (it numbers from 0 again), so the following events get a new epoch and the store
// clears the rank first, as the live subscriber does.
type captureStream struct {
	last  uint64
	epoch int
}

// captureEvents decodes one capture line into store events.
func captureEvents(line []byte, blockSize int, streams map[captureKey]*captureStream) (string, []statestore.Event, error) {
	var c Capture
	if err := json.Unmarshal(line, &c); err != nil {
		return "", nil, err
	}
	if err := statestore.CheckID("worker_id", c.WorkerID); err != nil {
		return "", nil, err
	}
	if c.DPRank < 0 || c.DPRank >= statestore.MaxDPSize {
		return "", nil, fmt.Errorf("dp_rank %d out of range", c.DPRank)
	}
	if c.Seq >= (1<<64-1)/MaxEventsPerMessage {
		return "", nil, fmt.Errorf("seq %d too large", c.Seq)
	}
	b, err := vllmwire.Decode(c.Payload)
	if err != nil {
		return "", nil, fmt.Errorf("payload: %v", err)
	}
	if len(b.Events) > MaxEventsPerMessage {
		return "", nil, fmt.Errorf("%d events in one message (at most %d)", len(b.Events), MaxEventsPerMessage)
	}
	k := captureKey{c.WorkerID, c.DPRank}
	st := streams[k]
	switch {
	case st == nil:
		st = &captureStream{epoch: 1}
		streams[k] = st
	case c.Seq < st.last:
		st.epoch++
	}
	st.last = c.Seq
	evs, _ := ingest.Normalize(nil, b, ingest.NormalizeParams{DPRank: c.DPRank, Epoch: fmt.Sprintf("capture-%d", st.epoch),
		FirstEventID: c.Seq*MaxEventsPerMessage + 1, PoolBlockSize: blockSize})
	return c.WorkerID, evs, nil
}
