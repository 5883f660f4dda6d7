package ingest

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
)

// processEpochPrefix makes epoch names unique across ingest processes: an epoch is an engine process
// as one ingest process saw it, and ids are never compared across the two (see the package doc).
var processEpochPrefix = func() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics on failure since Go 1.24)
	return "zmq-" + hex.EncodeToString(b[:])
}()

// epochCounter numbers epochs within the process, across subscribers, so a worker removed and added
// again never reuses an epoch name.
var epochCounter atomic.Uint64

func newEpoch(prefix string) string {
	return prefix + "-" + strconv.FormatUint(epochCounter.Add(1), 10)
}
