package main

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

// benchReleaser is `bench route --release-delay`'s bench.Releaser: the router's own release coalescing
// (core.ReleaseQueue, as core.Router.Route and Release use it), so the benchmark times exactly what
// `serve --release-delay` does. Kept out of cmd_bench_route.go, which scripts/bench-compare.sh -g grafts
// onto older revisions whose store lacks RouteRequest.Releases.
type benchReleaser struct{ q *core.ReleaseQueue }

func init() {
	newBenchReleaser = func(st statestore.Store, delay time.Duration) bench.Releaser {
		return benchReleaser{core.NewReleaseQueue(st, delay, 5*time.Second, func() int64 { return time.Now().UnixMilli() },
			slog.New(slog.NewTextHandler(os.Stderr, nil)))}
	}
}

func (b benchReleaser) Route(ctx context.Context, st statestore.Store, req statestore.RouteRequest) (statestore.Decision, error) {
	req.Releases = b.q.Take(req.Pool)
	d, err := st.Route(ctx, req)
	b.q.Settle(req.Pool, req.Releases, err)
	return d, err
}

func (b benchReleaser) Release(pool, id string) { b.q.Add(pool, id) }

func (b benchReleaser) Flush() { b.q.Flush("") }
