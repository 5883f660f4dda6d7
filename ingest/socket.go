package ingest

import (
	"encoding/binary"

	"github.com/go-zeromq/zmq4"
)

// closeSocket closes a zmq4 socket and drains its receive queue. zmq4 reads each connection in a
// goroutine that hands messages to a 10-slot queue without watching for close; if nobody reads after
// Close that goroutine blocks forever (a leak per connection). Draining frees it: it then sees the
// closed connection and returns. Recv on a closed socket never blocks; it races a closed context
// against the queue, so the drain stops only after many consecutive misses.
func closeSocket(s zmq4.Socket) {
	_ = s.Close()
	const wantMisses, maxCalls = 24, 1024
	misses := 0
	for i := 0; i < maxCalls && misses < wantMisses; i++ {
		if _, err := s.Recv(); err != nil {
			misses++
		} else {
			misses = 0
		}
	}
}

func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(make([]byte, 0, 8), v) }
