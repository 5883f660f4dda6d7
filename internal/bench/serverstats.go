package bench

import (
	"context"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// serverStats is what a store that runs on a server (statestore.Redis) offers the benchmarks: counter
// snapshots to difference over a measured phase, its SLOWLOG, and its own namespace to drop. The
// benchmarks work on any statestore.Store; the server figures appear only where a store has these.
type serverStats interface {
	Stats(ctx context.Context) (statestore.ServerStats, error)
	Namespace() string
	MarkSlowlog(ctx context.Context) (statestore.SlowlogMark, error)
	SlowlogSince(ctx context.Context, mark statestore.SlowlogMark, match string) (statestore.SlowlogSummary, error)
}

// namespaceDropper deletes a store's own key namespace (never a shared one).
type namespaceDropper interface {
	DropNamespace(ctx context.Context) (int, error)
	WaitLazyFree(ctx context.Context, timeout time.Duration) error
}

// phase measures one phase on a server: counters before, the load average, the slowlog mark.
type phase struct {
	ss     serverStats
	before statestore.ServerStats
	mark   statestore.SlowlogMark
	load   LoadAvg
}

// startPhase snapshots st's server counters (if it has any) and the load average.
func startPhase(ctx context.Context, st statestore.Store) (*phase, error) {
	p := &phase{load: ReadLoadAvg()}
	ss, ok := st.(serverStats)
	if !ok {
		return p, nil
	}
	p.ss = ss
	var err error
	if p.mark, err = ss.MarkSlowlog(ctx); err != nil {
		return nil, err
	}
	if p.before, err = ss.Stats(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

// end returns the counter deltas since startPhase (zero without a server) and the slowlog entries of
// this store's namespace logged since; ok reports whether there was a server.
func (p *phase) end(ctx context.Context) (d statestore.ServerStats, slow statestore.SlowlogSummary, ok bool, err error) {
	if p.ss == nil {
		return d, slow, false, nil
	}
	after, err := p.ss.Stats(ctx)
	if err != nil {
		return d, slow, true, err
	}
	slow, err = p.ss.SlowlogSince(ctx, p.mark, p.ss.Namespace())
	return after.Sub(p.before), slow, true, err
}

// freshRuns makes n measurements, each on a store open returns (a fresh namespace): run(st, repeat) with
// repeat counted from 1, then the namespace is dropped and the store closed, whether run failed or not.
// It returns the runs and the store's name (for the report).
func freshRuns[R any](ctx context.Context, open func() (statestore.Store, error), n int, run func(st statestore.Store, repeat int) (R, error)) ([]R, string, error) {
	var runs []R
	name := ""
	for r := 1; r <= n; r++ {
		st, err := open()
		if err != nil {
			return runs, name, err
		}
		name = st.Name()
		res, err := run(st, r)
		if derr := dropNamespace(ctx, st); err == nil {
			err = derr
		}
		st.Close()
		if err != nil {
			return runs, name, err
		}
		runs = append(runs, res)
	}
	return runs, name, nil
}

// dropNamespace deletes a store's own namespace if it has one (a fresh benchmark namespace) and waits
// for lazy frees, so the next measurement's memory baseline is settled.
func dropNamespace(ctx context.Context, st statestore.Store) error {
	d, ok := st.(namespaceDropper)
	if !ok {
		return nil
	}
	if _, err := d.DropNamespace(ctx); err != nil {
		return err
	}
	return d.WaitLazyFree(ctx, 30*time.Second)
}
