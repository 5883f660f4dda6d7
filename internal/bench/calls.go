package bench

import (
	"bufio"
	"fmt"
	"io"
	"time"
)

// Every call of an open-loop run, for the tail (`bench route --calls-out FILE`). A p99 is a count, not a
// cause: 1 % of calls over 1 ms at 8 k/s is 80 calls a second, and whether they are one 10-ms burst or 80
// lone slow calls, late sends or slow replies, at the same instants as a stall of Redis's CPU or of the
// client's, decides what could move it (scripts/tail_bursts.py reads the file beside the stall probes of
// scripts/bench-tail.sh; docs/PERFORMANCE.md "Twenty-sixth session").

// callRecord is one open-loop call: its scheduled time and, from it, when it was sent and when its reply
// came (µs). A slot left zero (no scheduled time) was never called (the run was cut short).
type callRecord struct {
	schedUnixUs  int64
	lagUs, latUs float64
}

// callRecorder keeps the calls of one open-loop run by slot; observe is loadSpec.Observe (each slot is
// called by one sender, so no lock).
type callRecorder struct {
	calls []callRecord
}

func newCallRecorder(slots int) *callRecorder { return &callRecorder{calls: make([]callRecord, slots)} }

func (c *callRecorder) observe(slot int, sched, start, end time.Time) {
	if slot < len(c.calls) {
		c.calls[slot] = callRecord{schedUnixUs: sched.UnixMicro(), lagUs: us(start.Sub(sched)), latUs: us(end.Sub(sched))}
	}
}

// callsHeader is the first line of a calls file: tab-separated columns, times in µs.
const callsHeader = "run\tslot\tsched_unix_us\tlag_us\tservice_us\tlatency_us\n"

// writeCalls appends run's calls (run: its index in the report's runs) to w (RunRoute wrote the header).
func writeCalls(w io.Writer, run int, c *callRecorder) error {
	bw := bufio.NewWriter(w)
	for slot, r := range c.calls {
		if r.schedUnixUs != 0 {
			fmt.Fprintf(bw, "%d\t%d\t%d\t%.1f\t%.1f\t%.1f\n", run, slot, r.schedUnixUs, r.lagUs, r.latUs-r.lagUs, r.latUs)
		}
	}
	return bw.Flush()
}
