package statestore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Server statistics for benchmarks and operators, summed over every node the client knows (one node,
// or each node of a cluster, replicas included: replication costs CPU too). They read INFO, SLOWLOG and
// CONFIG; nothing here is on a decision's path, and nothing here resets or flushes a server: a benchmark
// takes a snapshot before and after its measured phase and reports the deltas.

// ServerStats is one snapshot of the counters a benchmark differences.
type ServerStats struct {
	// CPUSeconds is INFO cpu used_cpu_user + used_cpu_sys, seconds of CPU the server processes have used
	// since they started (parsing, scripts, replies, background work).
	CPUSeconds float64
	// CPUSysSeconds is the used_cpu_sys part of CPUSeconds: the kernel's share (sockets, epoll, page
	// faults), which tells a per-request cost of the host from the server's own work in user space.
	CPUSysSeconds float64
	// UsedMemory is INFO memory used_memory, bytes.
	UsedMemory float64
	// Calls and CommandUsec sum INFO commandstats over every command: calls and µs spent inside
	// commands (parsing and replies excluded, hence only a secondary figure).
	Calls, CommandUsec float64
}

// Sub is s − o, field by field (the counters of a measured phase).
func (s ServerStats) Sub(o ServerStats) ServerStats {
	return ServerStats{CPUSeconds: s.CPUSeconds - o.CPUSeconds, CPUSysSeconds: s.CPUSysSeconds - o.CPUSysSeconds, UsedMemory: s.UsedMemory - o.UsedMemory,
		Calls: s.Calls - o.Calls, CommandUsec: s.CommandUsec - o.CommandUsec}
}

// Namespace is the key prefix this store writes under ("kvr:" or a fresh "kvr:r<hex>:").
func (r *Redis) Namespace() string { return r.prefix }

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

// InfoCPU is used_cpu_user + used_cpu_sys summed over the nodes, seconds.
func (r *Redis) InfoCPU(ctx context.Context) (float64, error) {
	user, sys, err := r.infoCPUParts(ctx)
	return user + sys, err
}

// infoCPUParts is used_cpu_user and used_cpu_sys, each summed over the nodes, seconds.
func (r *Redis) infoCPUParts(ctx context.Context) (user, sys float64, err error) {
	err = r.infoLines(ctx, "cpu", func(line string) {
		k, v, _ := strings.Cut(line, ":")
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "used_cpu_user":
			user += f
		case "used_cpu_sys":
			sys += f
		}
	})
	return user, sys, err
}

// Stats takes one snapshot of CPU, memory and commandstats over the nodes.
func (r *Redis) Stats(ctx context.Context) (ServerStats, error) {
	var s ServerStats
	user, sys, err := r.infoCPUParts(ctx)
	if err != nil {
		return s, err
	}
	s.CPUSeconds, s.CPUSysSeconds = user+sys, sys
	if s.UsedMemory, err = r.InfoField(ctx, "memory", "used_memory"); err != nil {
		return s, err
	}
	err = r.infoLines(ctx, "commandstats", func(line string) {
		if !strings.HasPrefix(line, "cmdstat_") {
			return
		}
		calls, usec := commandStatLine(line)
		s.Calls += calls
		s.CommandUsec += usec
	})
	return s, err
}

// CommandStats returns the calls and total microseconds of one command (lower case, e.g. "evalsha")
// from INFO commandstats, summed over the nodes (counters since start; difference two readings).
func (r *Redis) CommandStats(ctx context.Context, command string) (calls, usec float64, err error) {
	err = r.infoLines(ctx, "commandstats", func(line string) {
		if strings.HasPrefix(line, "cmdstat_"+command+":") {
			c, u := commandStatLine(line)
			calls += c
			usec += u
		}
	})
	return calls, usec, err
}

// commandStatLine parses "cmdstat_x:calls=N,usec=U,…" into calls and usec.
func commandStatLine(line string) (calls, usec float64) {
	_, v, _ := strings.Cut(line, ":")
	for _, kv := range strings.Split(v, ",") {
		k, val, _ := strings.Cut(kv, "=")
		f, _ := strconv.ParseFloat(val, 64)
		switch k {
		case "calls":
			calls = f
		case "usec":
			usec = f
		}
	}
	return calls, usec
}

// WaitLazyFree waits (up to timeout, polling every 50 ms) until no node has objects pending a lazy free,
// so a used_memory reading after UNLINK is not still falling.
func (r *Redis) WaitLazyFree(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		n, err := r.InfoField(ctx, "memory", "lazyfree_pending_objects")
		if err != nil || n == 0 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// dropScanCount is the keyspace buckets one SCAN step of DropNamespace visits: a step over a large
// keyspace with COUNT 1000 took 1.5–2.5 ms of Redis time on the loaded box (SPEC §8 wants every call under
// 1 ms, the benchmark's own cleanup included); 256 keeps a step near a quarter of that.
const dropScanCount = 256

// DropNamespace deletes every key under this store's prefix (SCAN on every node, UNLINK per key, so a
// cluster never sees a cross-slot call). It refuses the shared default namespace "kvr:": a benchmark
// drops only the fresh namespace it wrote. It returns the keys deleted.
func (r *Redis) DropNamespace(ctx context.Context) (int, error) {
	if r.prefix == "kvr:" {
		return 0, fmt.Errorf("%w: refusing to drop the shared namespace %q", ErrInvalid, r.prefix)
	}
	pattern := globEscape(r.prefix) + "*"
	deleted := 0
	for _, n := range r.c.Nodes() {
		cursor := uint64(0)
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(dropScanCount).Build()).AsScanEntry()
			if err != nil {
				return deleted, r.wrap("scan", err)
			}
			for _, k := range e.Elements {
				if err := r.c.Do(ctx, r.c.B().Unlink().Key(k).Build()).Error(); err != nil {
					return deleted, r.wrap("unlink", err)
				}
				deleted++
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return deleted, nil
}

// SlowlogMark is the newest SLOWLOG entry id per node at one moment (-1: an empty log).
type SlowlogMark map[string]int64

// SlowlogSummary describes the entries logged after a mark.
type SlowlogSummary struct {
	// ThresholdUs is the smallest slowlog-log-slower-than over the nodes, µs (calls slower than it are
	// logged).
	ThresholdUs int64 `json:"threshold_us"`
	// Logged counts entries after the mark whose arguments mention Match (every entry when Match is ""),
	// calls made by clients only: Redis also logs the commands a script runs, but those are part of
	// their call. MaxUs is the longest of them, µs.
	Logged int   `json:"logged"`
	MaxUs  int64 `json:"max_us"`
	// Truncated: more entries were logged than the log retains (slowlog-max-len), so Logged and MaxUs
	// cover only the retained ones.
	Truncated bool `json:"truncated,omitempty"`
	// LoggedAll counts every entry logged after the mark, by any client, from the entry ids (exact
	// even when truncated; on a server only the benchmark uses, all of them are the benchmark's).
	LoggedAll int64 `json:"logged_all"`
	// Entries are the matching entries themselves, oldest first, at most MaxSlowlogEntries: when each
	// was logged and what it was, so a slow call can be set beside what else happened then (a
	// benchmark's stall probe, docs/PERFORMANCE.md "Tail of calls at 4,096 workers").
	Entries []SlowlogEntry `json:"entries,omitempty"`
}

// MaxSlowlogEntries bounds SlowlogSummary.Entries.
const MaxSlowlogEntries = 256

// SlowlogEntry is one SLOWLOG entry.
type SlowlogEntry struct {
	// UnixS is when Redis logged it (its clock, seconds: SLOWLOG's resolution).
	UnixS int64 `json:"unix_s"`
	// Us is the call's execution time, µs.
	Us int64 `json:"us"`
	// Command is the command and, for FCALL, the function (e.g. "FCALL kvr6_…_route").
	Command string `json:"command"`
}

// slowEntry is one SLOWLOG GET entry.
type slowEntry struct {
	id, unix, us int64
	args         []string
	// inner: a command a script or function ran (client "?:0", Redis's Lua client), logged on its own
	// but part of its enclosing call, which is logged too when it is as slow.
	inner bool
}

// slowlog reads up to max entries of a node's SLOWLOG, newest first.
func (r *Redis) slowlog(ctx context.Context, addr string, max int64) ([]slowEntry, error) {
	n, ok := r.c.Nodes()[addr]
	if !ok {
		return nil, nil
	}
	arr, err := n.Do(ctx, n.B().SlowlogGet().Count(max).Build()).ToArray()
	if err != nil {
		return nil, r.wrap("slowlog get", err)
	}
	out := make([]slowEntry, 0, len(arr))
	for _, m := range arr {
		f, err := m.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		e := slowEntry{}
		e.id, _ = f[0].AsInt64()
		e.unix, _ = f[1].AsInt64()
		e.us, _ = f[2].AsInt64()
		if len(f) > 4 {
			peer, _ := f[4].ToString()
			e.inner = strings.HasPrefix(peer, "?")
		}
		args, _ := f[3].ToArray()
		for _, a := range args {
			s, _ := a.ToString()
			e.args = append(e.args, s)
		}
		out = append(out, e)
	}
	return out, nil
}

// MarkSlowlog records the newest SLOWLOG id of every node.
func (r *Redis) MarkSlowlog(ctx context.Context) (SlowlogMark, error) {
	m := SlowlogMark{}
	for addr := range r.c.Nodes() {
		es, err := r.slowlog(ctx, addr, 1)
		if err != nil {
			return nil, err
		}
		m[addr] = -1
		if len(es) > 0 {
			m[addr] = es[0].id
		}
	}
	return m, nil
}

// SlowlogSince summarises the entries every node logged after mark whose arguments contain match (the
// store's namespace: calls of other clients on a shared server are not counted).
func (r *Redis) SlowlogSince(ctx context.Context, mark SlowlogMark, match string) (SlowlogSummary, error) {
	var s SlowlogSummary
	th, err := r.SlowlogThreshold(ctx)
	if err != nil {
		return s, err
	}
	s.ThresholdUs = th
	for addr, last := range mark {
		es, err := r.slowlog(ctx, addr, -1)
		if err != nil {
			return s, err
		}
		if len(es) > 0 && es[0].id > last {
			s.LoggedAll += es[0].id - last
		}
		oldest, first := int64(-1), len(s.Entries)
		for _, e := range es {
			if e.id <= last {
				break
			}
			oldest = e.id
			if !e.inner && (match == "" || argsContain(e.args, match)) {
				s.Logged++
				s.MaxUs = max(s.MaxUs, e.us)
				if len(s.Entries) < MaxSlowlogEntries {
					s.Entries = append(s.Entries, SlowlogEntry{UnixS: e.unix, Us: e.us, Command: slowCommand(e.args)})
				}
			}
		}
		slices.Reverse(s.Entries[first:])   // this node's, oldest first
		if len(es) > 0 && oldest > last+1 { // entries between the mark and the oldest retained were dropped
			s.Truncated = true
		}
	}
	slices.SortStableFunc(s.Entries, func(a, b SlowlogEntry) int { return cmp.Compare(a.UnixS, b.UnixS) })
	return s, nil
}

// slowCommand names a logged call: its command, and the function of an FCALL.
func slowCommand(args []string) string {
	switch {
	case len(args) == 0:
		return ""
	case len(args) > 1 && strings.EqualFold(args[0], "FCALL"):
		return args[0] + " " + args[1]
	default:
		return args[0]
	}
}

func argsContain(args []string, sub string) bool {
	for _, a := range args {
		if strings.Contains(a, sub) {
			return true
		}
	}
	return false
}

// SlowlogThreshold is the smallest slowlog-log-slower-than over the nodes, µs (negative: logging off).
func (r *Redis) SlowlogThreshold(ctx context.Context) (int64, error) {
	min := int64(0)
	first := true
	for _, n := range r.c.Nodes() {
		kv, err := n.Do(ctx, n.B().ConfigGet().Parameter("slowlog-log-slower-than").Build()).AsStrMap()
		if err != nil {
			return 0, r.wrap("config get slowlog-log-slower-than", err)
		}
		v, err := strconv.ParseInt(kv["slowlog-log-slower-than"], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("slowlog-log-slower-than %q: %w", kv["slowlog-log-slower-than"], err)
		}
		if first || v < min {
			min, first = v, false
		}
	}
	return min, nil
}

// SetSlowlogThreshold sets slowlog-log-slower-than (µs) on every node and returns a function that
// restores each node's previous value. Only for an explicit operator request (bench --slowlog-us).
func (r *Redis) SetSlowlogThreshold(ctx context.Context, us int64) (restore func(context.Context) error, err error) {
	old := map[string]string{}
	for addr, n := range r.c.Nodes() {
		kv, err := n.Do(ctx, n.B().ConfigGet().Parameter("slowlog-log-slower-than").Build()).AsStrMap()
		if err != nil {
			return nil, r.wrap("config get slowlog-log-slower-than", err)
		}
		old[addr] = kv["slowlog-log-slower-than"]
	}
	restore = func(ctx context.Context) error {
		for addr, v := range old {
			if n, ok := r.c.Nodes()[addr]; ok {
				if err := n.Do(ctx, n.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", v).Build()).Error(); err != nil {
					return r.wrap("config set slowlog-log-slower-than", err)
				}
			}
		}
		return nil
	}
	for _, n := range r.c.Nodes() {
		if err := n.Do(ctx, n.B().ConfigSet().ParameterValue().ParameterValue("slowlog-log-slower-than", strconv.FormatInt(us, 10)).Build()).Error(); err != nil {
			_ = restore(ctx)
			return nil, r.wrap("config set slowlog-log-slower-than", err)
		}
	}
	return restore, nil
}

// globEscape quotes SCAN MATCH's metacharacters, so a key prefix (user-chosen) matches itself literally
// (the hex pool tag has none). Kept in this file so scripts/bench-compare.sh -g can graft it onto older
// revisions.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// CallFunction runs FCALL fn with keys and args and discards the reply: for benchmark drivers that load
// the server with a Functions library of their own (`kvrouter bench floor`: scripts/redis-floor's bare
// decision), so that they reach Redis through this package like every other caller. keys must share one
// hash tag on a cluster.
func (r *Redis) CallFunction(ctx context.Context, fn string, keys, args []string) error {
	err := r.c.Do(ctx, r.c.B().Fcall().Function(fn).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).Error()
	if err != nil {
		return r.wrap("fcall "+fn, err)
	}
	return nil
}
