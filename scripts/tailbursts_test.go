package scripts_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTailBursts: scripts/tail_bursts.py groups the calls at or over the threshold into bursts and charges
// each burst's calls to one class — the larger of the server's and the client's stalls inside it, else a
// late send, else queued — on a synthetic calls file (bench route --calls-out) and two probe files.
func TestTailBursts(t *testing.T) {
	dir := t.TempDir()
	const t0 = int64(1_700_000_000_000_000) // µs
	var calls strings.Builder
	calls.WriteString("run\tslot\tsched_unix_us\tlag_us\tservice_us\tlatency_us\n")
	slow := map[int][2]float64{} // slot → lag, latency
	for i := 100; i < 120; i++ { // a burst inside a client-CPU stall
		slow[i] = [2]float64{1500, 2500}
	}
	for i := 300; i < 305; i++ { // a burst inside a Redis-CPU stall
		slow[i] = [2]float64{10, 1800}
	}
	for i := 500; i < 503; i++ { // sent late, no stall
		slow[i] = [2]float64{1200, 1400}
	}
	slow[700] = [2]float64{5, 1100} // queued: nothing seen
	for i := 0; i < 1000; i++ {
		lag, lat := 1.0, 150.0
		if s, ok := slow[i]; ok {
			lag, lat = s[0], s[1]
		}
		fmt.Fprintf(&calls, "0\t%d\t%d\t%.1f\t%.1f\t%.1f\n", i, t0+int64(i)*100, lag, lat-lag, lat)
	}
	probe := func(name string, start, us int64) string {
		p := filepath.Join(dir, name)
		b, _ := json.Marshal(map[string]any{"stalls": []map[string]any{{"start_unix_us": start, "us": us}}})
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	callsPath := filepath.Join(dir, "calls.tsv")
	if err := os.WriteFile(callsPath, []byte(calls.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python(), "tail_bursts.py", callsPath,
		"--server-probe", probe("server.json", t0+300*100, 1000),
		"--client-probe", probe("client.json", t0+100*100, 2000))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tail_bursts.py: %v\n%s", err, out)
	}
	for _, want := range []string{
		"run 0: 1000 calls",
		"29 at or over 1000 µs (2.90 %) in 4 bursts",
		"slow calls by class: server stall 5, client stall 20, sent late 3, queued 1",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
