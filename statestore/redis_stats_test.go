package statestore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisStatsAndNamespace: counters only grow (a benchmark differences them, nothing resets them);
// SLOWLOG entries after a mark are counted for the store's namespace only; the slowlog threshold is
// restored; DropNamespace deletes exactly this store's keys and refuses the shared namespace.
func TestRedisStatsAndNamespace(t *testing.T) {
	ctx := context.Background()
	srv := sharedRedis(t)
	mine := newRedisStorePrefix(t, "kvr:run-mine:", srv.Addr())
	other := newRedisStorePrefix(t, "kvr:run-other:", srv.Addr())
	shared := newRedisStorePrefix(t, "kvr:", srv.Addr())

	before, err := mine.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := mine.SetSlowlogThreshold(ctx, 0) // log every call
	if err != nil {
		t.Fatal(err)
	}
	mark, err := mine.MarkSlowlog(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range []*statestore.Redis{mine, other} {
		if err := st.PutPool(ctx, "p", statestore.DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
		if err := st.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: "w0", URL: "http://w0"}, 1); err != nil {
			t.Fatal(err)
		}
	}
	slow, err := mine.SlowlogSince(ctx, mark, mine.Namespace())
	if err != nil {
		t.Fatal(err)
	}
	all, err := mine.SlowlogSince(ctx, mark, "")
	if err != nil {
		t.Fatal(err)
	}
	if slow.ThresholdUs != 0 || slow.Logged < 2 || all.Logged <= slow.Logged || slow.Truncated || all.LoggedAll < int64(all.Logged) {
		t.Errorf("slowlog of the namespace %+v, of everything %+v; want ≥ 2 of mine, more in all", slow, all)
	}
	// Entries: one per matching call, oldest first, FCALLs named by their function.
	if len(slow.Entries) != slow.Logged {
		t.Errorf("%d entries for %d logged calls", len(slow.Entries), slow.Logged)
	}
	fcalls := 0
	for i, e := range slow.Entries {
		if i > 0 && e.UnixS < slow.Entries[i-1].UnixS || e.Us < 0 || e.UnixS <= 0 {
			t.Errorf("entry %d %+v: want oldest first, times set", i, e)
		}
		if strings.HasPrefix(e.Command, "FCALL kvr") {
			fcalls++
		}
	}
	if fcalls < 2 {
		t.Errorf("entries %+v: want the put_pool and put_worker FCALLs named by function", slow.Entries)
	}
	if err := restore(ctx); err != nil {
		t.Fatal(err)
	}
	if th, err := mine.SlowlogThreshold(ctx); err != nil || th != 10000 {
		t.Errorf("threshold after restore %d, %v; want the default 10000", th, err)
	}
	after, err := mine.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := after.Sub(before); d.CPUSeconds < 0 || d.CPUSysSeconds < 0 || d.CPUSysSeconds > d.CPUSeconds || d.Calls < 4 || d.CommandUsec <= 0 || d.UsedMemory <= 0 {
		t.Errorf("stats delta %+v", d)
	}

	n, err := mine.DropNamespace(ctx)
	if err != nil || n == 0 {
		t.Fatalf("DropNamespace = %d, %v", n, err)
	}
	if err := mine.WaitLazyFree(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.GetPool(ctx, "p"); !errors.Is(err, statestore.ErrUnknownPool) {
		t.Errorf("own pool after DropNamespace: %v", err)
	}
	if _, err := other.GetPool(ctx, "p"); err != nil {
		t.Errorf("another namespace's pool after DropNamespace: %v", err)
	}
	if _, err := shared.DropNamespace(ctx); !errors.Is(err, statestore.ErrInvalid) {
		t.Errorf("DropNamespace of kvr: = %v; want ErrInvalid", err)
	}
}
