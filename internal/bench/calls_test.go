package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestRouteCallsOut: --calls-out writes a header, then one row per call of every open-loop run (none of the
// closed-loop runs), each naming its run's index in the report, slots in schedule order, latency = send lag +
// service.
func TestRouteCallsOut(t *testing.T) {
	o := tinyRoute()
	var out strings.Builder
	o.CallsOut = &out
	rep, err := RunRoute(context.Background(), []RouteTarget{memTarget()}, o)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if lines[0]+"\n" != callsHeader {
		t.Fatalf("header %q", lines[0])
	}
	rows := map[int]int{} // run index → rows
	lastSched := map[int]int64{}
	for _, l := range lines[1:] {
		f := strings.Split(l, "\t")
		if len(f) != 6 {
			t.Fatalf("row %q: %d columns", l, len(f))
		}
		run, _ := strconv.Atoi(f[0])
		sched, _ := strconv.ParseInt(f[2], 10, 64)
		lag, _ := strconv.ParseFloat(f[3], 64)
		svc, _ := strconv.ParseFloat(f[4], 64)
		lat, _ := strconv.ParseFloat(f[5], 64)
		if run < 0 || run >= len(rep.Runs) || rep.Runs[run].Mode != "open" {
			t.Fatalf("row %q: run %d is not an open-loop run of the report", l, run)
		}
		if sched < lastSched[run] || svc < 0 || lat+0.15 < lag+svc || lat-0.15 > lag+svc {
			t.Errorf("row %q: schedule out of order or latency ≠ lag + service", l)
		}
		rows[run]++
		lastSched[run] = sched
	}
	for i, r := range rep.Runs {
		if want := map[bool]int{true: r.Decisions}[r.Mode == "open"]; rows[i] != want {
			t.Errorf("run %d (%s): %d rows, want %d", i, r.Mode, rows[i], want)
		}
	}
}
