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

// TestRedisReclaimCallBudget: a cleared rank's index entries are reclaimed by later calls a bounded amount
// of Redis work at a time (RECLAIM_CALLS calls of the walk per apply_events: HSCAN of engine-map buckets
// from a cursor kept between calls, reads and writes of event-index entries, a page cut where the budget
// ends), not a bucket at a time, and in the end completely: no engine-map bucket of the dead slot, no
// reclaim cursor and no dead slot are left, and the index answers as the memory store's does. Each call's
// Redis commands (INFO commandstats) stay within the budget over what the same call costs with nothing to
// reclaim. Both bucket encodings: hashtable (HSCAN pages through them) and listpack (HSCAN returns a bucket
// whole; the budget cuts the page).
func TestRedisReclaimCallBudget(t *testing.T) {
	// hashtable-encoded buckets (HSCAN pages through them), then listpack-encoded ones (~23 entries each here:
	// HSCAN returns a bucket whole, so the budget cuts the page and 'rp' resumes it).
	for _, lp := range []string{"8", "512"} {
		t.Run("hash-max-listpack-entries="+lp, func(t *testing.T) { reclaimCallBudget(t, lp) })
	}
}

func reclaimCallBudget(t *testing.T, listpack string) {
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
	// commands: every command Redis ran so far but INFO and FCALL (the calls' own redis.calls).
	commands := func() int64 {
		info, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if !ok || name == "info" || name == "fcall" || name == "fcall_ro" || name == "llen" {
				continue
			}
			var n int64
			fmt.Sscanf(rest, "%d", &n)
			sum += n
		}
		return sum
	}
	// Each later call of w1 (a one-block event) reclaims its budget; count the calls it takes and the
	// commands each ran.
	oneBlock := func(k int) Event {
		return Event{Kind: EventStored, Blocks: []StoredBlock{{EngineHash: 1<<50 + uint64(k), LocalHash: 1<<50 + uint64(k)}}}
	}
	calls := 0
	var most int64
	for ; llen() > 0 && calls < 2000; calls++ {
		before := commands()
		apply(rs, "w1", oneBlock(calls))
		most = max(most, commands()-before)
	}
	before := commands()
	apply(rs, "w1", oneBlock(calls)) // nothing left to reclaim: the call's own commands
	base := commands() - before
	// The walk's own position (LINDEX, HMGET and HGET of it, its HSET back) and a finished slot's clean-up
	// (LPOP, four HDELs) are outside the budget, and the entry that ends it may overrun it by three calls.
	const budget = 16 // lib.lua RECLAIM_CALLS
	if limit := base + budget + 3 + 9; most > limit {
		t.Fatalf("a reclaiming call ran %d commands; one with nothing to reclaim %d, so reclamation took %d, over the budget of %d (+ 12)", most, base, most-base, budget)
	}
	// Every entry costs at least two of the budget's calls (its read and its write), so at most ~9 a call.
	if calls < n/10 || llen() != 0 {
		t.Fatalf("reclaiming %d entries took %d calls (at most ~9 entries a call: at least %d), %d dead slots left", n, calls, n/10, llen())
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
	t.Logf("%d entries reclaimed in %d calls; the most commands in one %d, %d with nothing to reclaim", n, calls, most, base)
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
