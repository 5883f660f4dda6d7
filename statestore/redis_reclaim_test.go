package statestore

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestRedisReclaimEntryBudget: a cleared rank's index entries are reclaimed by later calls a bounded
// number of entries at a time (RECLAIM_ENTRIES engine-map entries per apply_events, walked with HSCAN
// from a cursor kept between calls, a page cut where the budget ends), not a bucket at a time, and in
// the end completely: no engine-map bucket of the dead slot, no reclaim cursor and no dead slot are
// left, and the index answers as the memory store's does. Both bucket encodings: hashtable (HSCAN pages through them) and listpack (HSCAN
// returns a bucket whole; the budget cuts the page).
func TestRedisReclaimEntryBudget(t *testing.T) {
	// hashtable-encoded buckets (HSCAN pages through them), then listpack-encoded ones (~23 entries each here:
	// HSCAN returns a bucket whole, so the budget cuts the page and 'rp' resumes it).
	for _, lp := range []string{"8", "512"} {
		t.Run("hash-max-listpack-entries="+lp, func(t *testing.T) { reclaimEntryBudget(t, lp) })
	}
}

func reclaimEntryBudget(t *testing.T, listpack string) {
	srv := testredis.Start(t, "--hash-max-listpack-entries", listpack)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := NewRedis(c, RedisOptions{Name: "redis", Prefix: "rcl:"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	mem := NewMemory()
	ctx := context.Background()
	stores := map[string]Store{"memory": mem, "redis": rs}

	const n, shared = 6000, 100
	local := make([]uint64, n)
	blocks := make([]StoredBlock, n)
	for i := range local {
		local[i] = uint64(i) + 1
		blocks[i] = StoredBlock{EngineHash: 1<<40 + uint64(i), LocalHash: local[i]}
	}
	seq := blockhash.Sequence(nil, local)
	apply := func(st Store, wid string, evs ...Event) {
		t.Helper()
		if _, err := st.ApplyEvents(ctx, EventBatch{Pool: "p", WorkerID: wid, Events: evs, NowMs: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range stores {
		if err := st.PutPool(ctx, "p", DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"w0", "w1"} {
			if err := st.PutWorker(ctx, "p", WorkerSpec{WorkerID: w, URL: "http://" + w}, 1000); err != nil {
				t.Fatal(err)
			}
		}
		apply(st, "w0", Event{Kind: EventStored, Blocks: blocks})
		apply(st, "w1", Event{Kind: EventStored, Blocks: blocks[:shared]})
		apply(st, "w0", Event{Kind: EventCleared})
	}

	keys := PoolKeys("rcl:", "p")
	dead := keys[9]
	llen := func() int64 {
		v, err := c.Do(ctx, c.B().Llen().Key(dead).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if llen() != 1 {
		t.Fatalf("dead slots after the clear: %d, want 1", llen())
	}
	deadSlot, err := c.Do(ctx, c.B().Lindex().Key(dead).Index(0).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	// Each later call of w1 (a one-block event) reclaims its budget; count the calls it takes.
	calls := 0
	for ; llen() > 0 && calls < 1000; calls++ {
		apply(rs, "w1", Event{Kind: EventStored, Blocks: []StoredBlock{{EngineHash: 1<<50 + uint64(calls), LocalHash: 1<<50 + uint64(calls)}}})
	}
	// 6,000 entries at ≤ budget per call (a page longer than what is left of the budget is cut, 'rp'), the
	// clearing call's own share included: at least 6,000/16 − 1 counted calls; and every call makes
	// progress (a bucket costs at least one unit): at most 6,000/16 + 256 buckets.
	const budget = 16 // lib.lua RECLAIM_ENTRIES
	if min, max := n/budget-1, n/budget+256; calls < min || calls > max {
		t.Fatalf("reclaiming %d entries took %d calls; want between %d and %d (a bounded number of entries per call)", n, calls, min, max)
	}
	var left []string
	var cursor uint64
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Match(keys[15]+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		left = append(left, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	// w1's engine map remains; none of the cleared slot's.
	if len(left) == 0 {
		t.Errorf("no engine-map bucket left at all: w1's should remain")
	}
	for _, k := range left {
		if strings.HasPrefix(k, keys[15]+deadSlot+":") {
			t.Errorf("engine-map bucket %q of the dead slot left after reclamation", k)
		}
	}
	if v, err := c.Do(ctx, c.B().Hmget().Key(keys[6]).Field("rc", "rs", "rp").Build()).ToArray(); err != nil || !v[0].IsNil() || !v[1].IsNil() || !v[2].IsNil() {
		t.Errorf("reclaim cursor left in sc: %v %v", v, err)
	}
	t.Logf("%d entries reclaimed in %d calls", n, calls)
	// Both stores answer alike: only w1 holds the chain's first blocks.
	got := map[string][]Score{}
	for name, st := range stores {
		sc, err := st.Overlap(ctx, "p", seq, 2000)
		if err != nil {
			t.Fatal(err)
		}
		got[name] = sc
	}
	if !reflect.DeepEqual(got["memory"], got["redis"]) || len(got["redis"]) != 1 || got["redis"][0].Blocks != shared {
		t.Fatalf("overlap after reclamation: %s", fmt.Sprint(got))
	}
}
