package bench

import (
	"strings"
	"testing"
)

// TestRouteTableClientColumn: the client CPU column shows the spin tail's part and the busy share, and an
// open-loop run whose client was BusyClient busy or more gets a note naming it; a calmer one, and a closed
// loop (busy by design), do not.
func TestRouteTableClientColumn(t *testing.T) {
	sum := func(v float64) Summary { return Summary{Median: v, Min: v, Max: v} }
	rep := RouteReport{Repeat: 1, Summaries: []RouteSummary{
		{Store: "redis", Workers: 16, Clients: 16, Mode: "open", ClientCPUus: sum(97.3), ClientSpinUs: sum(13.6), ClientBusy: sum(0.6)},
		{Store: "redis", Workers: 64, Clients: 1, Mode: "open", ClientCPUus: sum(120), ClientBusy: sum(0.93)},
		{Store: "memory", Workers: 64, Clients: 16, Mode: "closed", ClientCPUus: sum(9), ClientBusy: sum(1)}, // saturated by design: no note
	}}
	var b strings.Builder
	writeRouteTable(&b, rep)
	out := b.String()
	for _, want := range []string{"97.3 [97.3–97.3] (spin 13.6, 60 % busy)", "120.0 [120.0–120.0] (93 % busy)",
		"note: the client's CPUs were up to 93 % busy (64 workers, 1 clients, open)"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "note: the client's CPUs"); n != 1 {
		t.Errorf("%d busy-client notes, want 1 (only the 93 %% run):\n%s", n, out)
	}
}
