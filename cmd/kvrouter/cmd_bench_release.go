package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/bench"
	"github.com/kvrouter/kvrouter/statestore"
)

// `bench route --release-delay`'s bench.Releaser is the router's own release coalescing (core.ReleaseQueue,
// what core.Router.Route and Release use), so the benchmark times exactly what `serve --release-delay` does.
// Wired here, not in cmd_bench_route.go, which scripts/bench-compare.sh -g grafts onto older revisions whose
// store lacks RouteRequest.Releases.
func init() {
	newBenchReleaser = func(st statestore.Store, delay time.Duration) bench.Releaser {
		return core.NewReleaseQueue(st, delay, 5*time.Second, func() int64 { return time.Now().UnixMilli() },
			slog.New(slog.NewTextHandler(os.Stderr, nil)))
	}
}
