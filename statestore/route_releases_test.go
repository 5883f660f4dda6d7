package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestRouteReleases: a route's coalesced dones (RouteRequest.Releases) end their leases exactly as Done
// would, before the decision, whenever the request validates (noelig and conflict too) and never when it
// does not; unknown and repeated ids are skipped. Both stores, one scenario.
func TestRouteReleases(t *testing.T) {
	for name, st := range bothStores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			setupPool(t, st, "p", statestore.DefaultPoolConfig(4), "w0")
			requests := func(want int64) {
				t.Helper()
				ws, err := st.Workers(ctx, "p", 10)
				if err != nil {
					t.Fatal(err)
				}
				if got := ws[0].Ranks[0].ActiveRequests; got != want {
					t.Fatalf("active requests %d, want %d", got, want)
				}
			}
			route := func(id string, isl int64, releases ...string) error {
				t.Helper()
				_, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: id, ISL: isl, NowMs: 10, Releases: releases})
				return err
			}
			for _, id := range []string{"r1", "r2", "r3"} {
				if err := route(id, 8); err != nil {
					t.Fatal(err)
				}
			}
			requests(3)
			// r1 twice and an id with no lease: r1 ends once; the new booking counts.
			if err := route("r4", 8, "r1", "ghost", "r1"); err != nil {
				t.Fatal(err)
			}
			requests(3)
			if found, err := st.Done(ctx, "p", "r1", 10); err != nil || found {
				t.Fatalf("Done(r1) after its coalesced release = %v, %v; want false", found, err)
			}
			// A request that fails validation applies none of its releases.
			for _, c := range []struct {
				what     string
				isl      int64
				releases []string
			}{
				{"isl over max_prompt_tokens", 1 << 40, []string{"r2"}},
				{"too many releases", 8, make([]string, statestore.MaxRouteReleases+1)},
				{"an empty id", 8, []string{"r2", ""}},
			} {
				if c.what == "too many releases" {
					for i := range c.releases {
						c.releases[i] = fmt.Sprintf("x%d", i)
					}
					c.releases[0] = "r2"
				}
				if err := route("bad", c.isl, c.releases...); !errors.Is(err, statestore.ErrInvalid) {
					t.Fatalf("%s: %v, want ErrInvalid", c.what, err)
				}
				requests(3)
			}
			// A conflict (r3 is held) still ends the releases it carries: they ran before the check.
			if err := route("r3", 8, "r2"); !errors.Is(err, statestore.ErrConflict) {
				t.Fatalf("route r3 again: %v, want ErrConflict", err)
			}
			requests(2)
			// So does a route that finds nothing eligible.
			_, err := st.Route(ctx, statestore.RouteRequest{Pool: "p", RequestID: "r5", ISL: 8, NowMs: 10,
				ExcludedWorkers: []string{"w0"}, Releases: []string{"r3"}})
			if !errors.Is(err, statestore.ErrNoEligibleWorker) {
				t.Fatalf("route excluding w0: %v, want ErrNoEligibleWorker", err)
			}
			requests(1)
			// An explain ignores them (a route's only).
			if _, err := st.Explain(ctx, statestore.RouteRequest{Pool: "p", RequestID: "x", ISL: 8, NowMs: 10, Releases: []string{"r4"}}); err != nil {
				t.Fatal(err)
			}
			requests(1)
		})
	}
}
