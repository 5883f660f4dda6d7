package statestore

import (
	"context"
	"strconv"
	"strings"
)

// Server statistics for benchmarks and operators, summed over every node (one node, or each primary
// of a cluster). They read INFO; nothing here is on a decision's path.

// ResetStats runs CONFIG RESETSTAT on every node (zeroes INFO commandstats).
func (r *Redis) ResetStats(ctx context.Context) error {
	for _, n := range r.c.Nodes() {
		if err := n.Do(ctx, n.B().ConfigResetstat().Build()).Error(); err != nil {
			return r.wrap("config resetstat", err)
		}
	}
	return nil
}

// infoLines calls f for every line of INFO section on every node.
func (r *Redis) infoLines(ctx context.Context, section string, f func(line string)) error {
	for _, n := range r.c.Nodes() {
		s, err := n.Do(ctx, n.B().Info().Section(section).Build()).ToString()
		if err != nil {
			return r.wrap("info "+section, err)
		}
		for _, line := range strings.Split(s, "\n") {
			f(strings.TrimSpace(line))
		}
	}
	return nil
}

// InfoField sums a numeric INFO field (e.g. section "memory", field "used_memory", bytes) over the nodes.
func (r *Redis) InfoField(ctx context.Context, section, field string) (float64, error) {
	total := 0.0
	err := r.infoLines(ctx, section, func(line string) {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	})
	return total, err
}

// CommandStats returns the calls and total microseconds of one command (lower case, e.g. "evalsha")
// from INFO commandstats, summed over the nodes.
func (r *Redis) CommandStats(ctx context.Context, command string) (calls, usec float64, err error) {
	err = r.infoLines(ctx, "commandstats", func(line string) {
		v, ok := strings.CutPrefix(line, "cmdstat_"+command+":")
		if !ok {
			return
		}
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(val, 64)
			switch k {
			case "calls":
				calls += f
			case "usec":
				usec += f
			}
		}
	})
	return calls, usec, err
}
