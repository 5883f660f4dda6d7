package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisExplainRosterChange (issue 15): a paged explain whose roster changes between two pages is
// detected (the page's roster stamp is not the head's) and started again from the head; the retry's
// explanation equals the memory store's on the new roster (no candidate duplicated or missing). A roster
// that changes before every second page makes Explain fail with ErrConflict after its attempts. The
// change is made by the test hook between pages 1 and 2: deterministic, no concurrency.
func TestRedisExplainRosterChange(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	mem, rs := statestore.NewMemory(), newRedisStore(t, srv.Addr())
	stores := []statestore.Store{mem, rs}
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", statestore.DefaultPoolConfig(4)); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 30; i++ {
			spec := statestore.WorkerSpec{WorkerID: fmt.Sprintf("w%02d", i), URL: "http://w", DPSize: 1 + i%3}
			if err := s.PutWorker(ctx, "p", spec, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	req := statestore.RouteRequest{Pool: "p", RequestID: "x", ISL: 40, Random: 0.3, NowMs: 2}
	for i := 0; i < 10; i++ { // some loads
		r := req
		r.RequestID, r.PinnedWorker = fmt.Sprintf("l%d", i), fmt.Sprintf("w%02d", 3*i)
		routeAlike(t, ctx, stores, r)
	}
	// w05a sorts into the first page's range: every later candidate moves one position on.
	hooks, added, want := 0, 0, 0 // hook calls, workers registered by the hook, and how many it may register
	register := func(page int) {
		hooks++
		if page != 1 || added >= want {
			return
		}
		added++
		spec := statestore.WorkerSpec{WorkerID: fmt.Sprintf("w05a%d", added), URL: "http://new", DPSize: 2}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	statestore.SetExplainPaging(rs, 8, register)

	want = 1 // one change: detected, retried once, then the new roster's explanation
	got, err := rs.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	exp, err := mem.Explain(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pages != 8 || got.Snapshot == nil || *got.Snapshot { // 60 + 2 ranks in pages of 8
		t.Fatalf("pages %d snapshot %v, want 8 pages and snapshot false", got.Pages, got.Snapshot)
	}
	got.Pages, got.Snapshot = 0, nil
	if !reflect.DeepEqual(got, exp) {
		t.Fatalf("after the roster change:\n redis  %+v\n memory %+v", got, exp)
	}
	if hooks != 1+7 { // the first attempt stopped at page 2 (1 hook), the retry ran to the end (7)
		t.Fatalf("%d hook calls, want 1 + 7 (the change detected at page 2, one full retry)", hooks)
	}

	want = 100 // a change before every second page: the attempts run out
	hooks = 0
	_, err = rs.Explain(ctx, req)
	if !errors.Is(err, statestore.ErrConflict) || statestore.ErrorCode(err) != "conflict" {
		t.Fatalf("roster changing on every attempt: %v (code %s), want ErrConflict", err, statestore.ErrorCode(err))
	}
	if hooks != 3 {
		t.Fatalf("%d attempts, want 3", hooks)
	}
}
