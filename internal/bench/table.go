package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// fmtSummary prints "median [min–max]" with prec decimals, or "-" when every value is 0 (a figure
// the store does not have, e.g. Redis CPU of the embedded store).
func fmtSummary(s Summary, prec int) string {
	if s.Median == 0 && s.Min == 0 && s.Max == 0 {
		return "-"
	}
	return fmt.Sprintf("%.*f [%.*f–%.*f]", prec, s.Median, prec, s.Min, prec, s.Max)
}

// writeTable writes a tab-aligned table.
func writeTable(w io.Writer, header []string, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// BusyClient is the client_busy from which the route table warns, for an open-loop run, that the
// generator's own CPU is part of the latencies: at 0.8 a single-CPU client's own queue is already several calls deep on every disturbance.
const BusyClient = 0.8

// writeRouteTable prints the route summaries: median [min–max] over the repeats.
func writeRouteTable(w io.Writer, rep RouteReport) {
	carried := ""
	if rep.ReleaseDelayMs > 0 {
		carried = fmt.Sprintf(" (carried by the next route, release delay %g ms)", rep.ReleaseDelayMs)
	}
	fmt.Fprintf(w, "bench route: %d indexed entries, chains shared by %d workers, done after each decision: %v%s; median [min–max] of %d runs\n",
		rep.IndexedBlocks, rep.Sharing, rep.Done, carried, rep.Repeat)
	var rows [][]string
	for _, s := range rep.Summaries {
		name := s.Store
		if s.Variant != "" {
			name += " " + s.Variant
		}
		mode := s.Mode
		if s.Mode == "open" {
			mode = fmt.Sprintf("open@%.0f/s", s.TargetRate.Median)
		}
		slow := "-"
		if s.SlowAll > 0 || s.SlowMaxUs > 0 {
			slow = fmt.Sprintf("%d/%d (max %d µs)", s.SlowCalls, s.SlowAll, s.SlowMaxUs)
		}
		rows = append(rows, []string{name, fmt.Sprint(s.Workers), fmt.Sprint(s.PromptBlocks), fmt.Sprint(s.Clients), mode,
			fmtSummary(s.DecisionsPerS, 0), fmtSummary(s.P50us, 0), fmtSummary(s.P99us, 0), fmtSummary(s.MaxUs, 0),
			fmtSummary(s.LagP50us, 0), fmtSummary(s.ServiceP50us, 0), fmtSummary(s.ServiceP99us, 0), clientCPU(s), fmtSummary(s.RedisCPUus, 1), fmtSummary(s.RedisCPUusExclDone, 1), fmtSummary(s.RedisCPUSysUs, 1), fmtSummary(s.DecisionsPerCoreS, 0),
			fmtSummary(s.CommandUs, 1), slow, fmtSummary(s.Load, 2)})
	}
	writeTable(w, []string{"store", "workers", "prompt", "clients", "mode", "decisions/s", "p50 µs", "p99 µs", "max µs",
		"lag p50 µs", "service p50", "service p99", "client CPU µs/dec", "Redis CPU µs/dec", "excl. done", "of it sys", "dec/Redis core-s", "cmd µs/dec", "slowlog mine/all", "load 1m"}, rows)
	for _, r := range rep.Runs {
		if r.Slowlog != nil && r.Slowlog.ThresholdUs != 1000 {
			fmt.Fprintf(w, "note: the server logs calls slower than %d µs (slowlog-log-slower-than), so the slowlog column counts those, not calls over 1 ms; --slowlog-us 1000 sets it for the run\n", r.Slowlog.ThresholdUs)
			break
		}
	}
	for _, s := range rep.Summaries {
		if s.Mode == "open" && s.ClientBusy.Max >= BusyClient { // (a closed loop is meant to be busy)
			fmt.Fprintf(w, "note: the client's CPUs were up to %.0f %% busy (%d workers, %d clients, %s): a generator that busy queues its own calls, so the latencies are partly its own (and a real-time client that busy is throttled by the kernel, sched_rt_runtime_us)\n",
				100*s.ClientBusy.Max, s.Workers, s.Clients, s.Mode)
		}
	}
	for _, c := range rep.Calibrations {
		fmt.Fprintf(w, "calibration %s %d workers, %d-block prompts, %d clients, repeat %d: Redis CPU per call: route alone %.1f µs, done alone %.1f µs (%d calls)\n",
			c.Store, c.Workers, c.PromptBlocks, c.Clients, c.Repeat, c.RouteCPUus, c.DoneCPUus, c.Calls)
	}
}

// clientCPU prints the client's CPU per decision (median [min–max]), then in parentheses its spinning's
// part when the generator spun and how busy that kept the client's CPUs (medians).
func clientCPU(s RouteSummary) string {
	c := fmtSummary(s.ClientCPUus, 1)
	if c == "-" {
		return c
	}
	var extra []string
	if s.ClientSpinUs.Median > 0 {
		extra = append(extra, fmt.Sprintf("spin %.1f", s.ClientSpinUs.Median))
	}
	if s.ClientBusy.Median > 0 {
		extra = append(extra, fmt.Sprintf("%.0f %% busy", 100*s.ClientBusy.Median))
	}
	if len(extra) > 0 {
		c += " (" + strings.Join(extra, ", ") + ")"
	}
	return c
}
