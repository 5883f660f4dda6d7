package statestore

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/internal/testredis"
)

// Maps that grow (lib.lua lh_params, lh_split: linear hashing of each slot's engine map and of the pool's
// event index). The loads are set low (2 blocks per engine-map bucket, 1/16 entry per index bucket), so a
// few thousand blocks split hundreds of buckets; the memory store, which has no buckets, is the judge of
// every answer.

// engineHash spreads i over 64 bits (splitmix64's finalizer), so the engine hashes' last 3 bytes, which
// address a grown map, are uniform.
func engineHash(i uint64) uint64 {
	z := i + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// engineMapFixture is a Redis store and a memory store with pool p and workers w0, w1, and the chains
// stored on w0: chains[c] is chain c's blocks; chain c continues chain c−1 (its Stored events name the
// previous event's last engine hash as parent) unless c is a multiple of 8 (a new root).
type engineMapFixture struct {
	t      *testing.T
	ctx    context.Context
	c      rueidis.Client
	rs     *Redis
	stores map[string]Store
	keys   []string
	chains [][]StoredBlock
	seqs   [][]uint64 // each chain's sequence hashes from its root chain's start
}

// newEngineMapFixture sets the engine-map and event-index loads (entries per bucket before a split) for the
// test.
func newEngineMapFixture(t *testing.T, load, indexLoad float64) *engineMapFixture {
	oldG, oldE := engineMapLoad, eventIndexLoad
	engineMapLoad, eventIndexLoad = load, indexLoad
	t.Cleanup(func() { engineMapLoad, eventIndexLoad = oldG, oldE })
	srv := testredis.Start(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	rs, err := NewRedis(c, RedisOptions{Name: "redis", Prefix: "gm:"})
	if err != nil {
		t.Fatal(err)
	}
	f := &engineMapFixture{t: t, ctx: context.Background(), c: c, rs: rs,
		stores: map[string]Store{"memory": NewMemory(), "redis": rs}, keys: PoolKeys("gm:", "p")}
	for _, st := range f.stores {
		if err := st.PutPool(f.ctx, "p", DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
		for _, w := range []string{"w0", "w1"} {
			if err := st.PutWorker(f.ctx, "p", WorkerSpec{WorkerID: w, URL: "http://" + w}, 1000); err != nil {
				t.Fatal(err)
			}
		}
	}
	return f
}

// apply applies evs of worker wid on every store and returns the Redis store's result, failing the test
// when the two stores' results differ.
func (f *engineMapFixture) apply(wid string, evs ...Event) ApplyResult {
	f.t.Helper()
	got := map[string]ApplyResult{}
	for name, st := range f.stores {
		r, err := st.ApplyEvents(f.ctx, EventBatch{Pool: "p", WorkerID: wid, Events: evs, NowMs: 1000})
		if err != nil {
			f.t.Fatal(err)
		}
		got[name] = r
	}
	if got["redis"] != got["memory"] {
		f.t.Fatalf("apply %s: redis %+v, memory %+v", wid, got["redis"], got["memory"])
	}
	return got["redis"]
}

// storeChains stores n chains of per blocks on w0 (engine hashes from base), one Stored event each.
func (f *engineMapFixture) storeChains(base uint64, n, per int) {
	f.t.Helper()
	var prev []uint64
	for ch := 0; ch < n; ch++ {
		blocks := make([]StoredBlock, per)
		local := make([]uint64, per)
		for j := range blocks {
			k := base + uint64(ch*per+j)
			local[j] = k<<1 | 1
			blocks[j] = StoredBlock{EngineHash: engineHash(k), LocalHash: local[j]}
		}
		ev := Event{Kind: EventStored, Blocks: blocks}
		var parentSeq []uint64
		if ch%8 != 0 {
			last := f.chains[len(f.chains)-1]
			ev.Parent, ev.HasParent = last[len(last)-1].EngineHash, true
			parentSeq = prev
		}
		if r := f.apply("w0", ev); r.ParentNotFound != 0 || r.StoredBlocks != per {
			f.t.Fatalf("chain %d: %+v", ch, r)
		}
		var seq []uint64
		if len(parentSeq) > 0 {
			seq = blockhash.SequenceFrom(nil, parentSeq[len(parentSeq)-1], true, local)
		} else {
			seq = blockhash.Sequence(nil, local)
		}
		f.chains, f.seqs, prev = append(f.chains, blocks), append(f.seqs, seq), seq
	}
}

// removeAll removes every block of w0's chains, leaf first, 100 engine hashes per Removed event (so across
// every bucket), and fails unless each was found and removed.
func (f *engineMapFixture) removeAll() {
	f.t.Helper()
	var removed []uint64
	for c := len(f.chains) - 1; c >= 0; c-- {
		for j := len(f.chains[c]) - 1; j >= 0; j-- {
			removed = append(removed, f.chains[c][j].EngineHash)
		}
	}
	total := ApplyResult{}
	for i := 0; i < len(removed); i += 100 {
		total.Add(f.apply("w0", Event{Kind: EventRemoved, Removed: removed[i:min(i+100, len(removed))]}))
	}
	if total.BlockNotFound != 0 || total.RemovedBlocks != len(removed) {
		f.t.Fatalf("removing every block: %+v (want %d removed, none unknown)", total, len(removed))
	}
}

// overlapsAgree checks both stores' overlaps for a prefix of every chain.
func (f *engineMapFixture) overlapsAgree() {
	f.t.Helper()
	for c, seq := range f.seqs {
		q := seq[:len(seq)/2+1]
		got := map[string][]Score{}
		for name, st := range f.stores {
			sc, err := st.Overlap(f.ctx, "p", q, 2000)
			if err != nil {
				f.t.Fatal(err)
			}
			got[name] = sc
		}
		if !reflect.DeepEqual(got["redis"], got["memory"]) {
			f.t.Fatalf("chain %d: overlap redis %v, memory %v", c, got["redis"], got["memory"])
		}
	}
}

// bucketCounts returns fence's 'gn<slot>' fields: slot -> engine-map buckets.
func (f *engineMapFixture) bucketCounts() map[string]int {
	f.t.Helper()
	kv, err := f.c.Do(f.ctx, f.c.B().Hgetall().Key(f.keys[5]).Build()).AsStrMap()
	if err != nil {
		f.t.Fatal(err)
	}
	out := map[string]int{}
	for k, v := range kv {
		if strings.HasPrefix(k, "gn") {
			n, err := strconv.Atoi(v)
			if err != nil {
				f.t.Fatalf("sc %s = %q", k, v)
			}
			out[strings.TrimPrefix(k, "gn")] = n
		}
	}
	return out
}

// engineMapKeys returns the engine-map bucket keys of slot.
func (f *engineMapFixture) engineMapKeys(slot string) []string {
	f.t.Helper()
	var out []string
	var cursor uint64
	for {
		e, err := f.c.Do(f.ctx, f.c.B().Scan().Cursor(cursor).Match(f.keys[15]+slot+":*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return out
		}
	}
}

// largest returns the slot with the most buckets and its count.
func largest(counts map[string]int) (string, int) {
	slot, most := "", 0
	for s, n := range counts {
		if n > most {
			slot, most = s, n
		}
	}
	return slot, most
}

// TestRedisEngineMapGrows: a rank's engine map splits its buckets as the rank's blocks grow (2,560 blocks
// at 2 per bucket: ~1,280 buckets), and every use of the map still finds every block: Stored events whose
// parent lies in a split bucket, then every block Removed (none unknown), with both stores answering
// alike throughout; the emptied map leaves no bucket behind.
func TestRedisEngineMapGrows(t *testing.T) {
	f := newEngineMapFixture(t, 2, 64)
	f.storeChains(0, 160, 16) // 16-block calls: 8 splits each keep up (GSPLITS)
	slot, nb := largest(f.bucketCounts())
	if nb < 1200 || nb > 1280 {
		t.Fatalf("w0's engine map has %d buckets for 2,560 blocks at 2 per bucket; want 1,200–1,280", nb)
	}
	if n := len(f.engineMapKeys(slot)); n < nb/2 {
		t.Fatalf("%d engine-map keys for %d buckets: the entries did not spread", n, nb)
	}
	f.overlapsAgree()
	f.removeAll()
	f.overlapsAgree()
	if left := f.engineMapKeys(slot); len(left) != 0 {
		t.Fatalf("engine map of slot %s emptied, but %d bucket keys are left, e.g. %q", slot, len(left), left[0])
	}
}

// TestRedisEngineMapReclaim: a grown engine map of a cleared rank is reclaimed like any other: every
// bucket of the dead slot (all ~1,280, not layout 3's 256), its bucket count and the cursor go.
func TestRedisEngineMapReclaim(t *testing.T) {
	f := newEngineMapFixture(t, 2, 64)
	f.storeChains(0, 160, 16)
	slot, nb := largest(f.bucketCounts())
	if nb <= 1024 {
		t.Fatalf("w0's engine map has %d buckets; want a grown one", nb)
	}
	f.apply("w0", Event{Kind: EventCleared})
	llen := func() int64 {
		v, err := f.c.Do(f.ctx, f.c.B().Llen().Key(f.keys[9]).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	calls := 0
	for ; llen() > 0 && calls < 2000; calls++ {
		k := uint64(1<<40 + calls)
		f.apply("w1", Event{Kind: EventStored, Blocks: []StoredBlock{{EngineHash: engineHash(k), LocalHash: k}}})
	}
	if llen() != 0 {
		t.Fatalf("dead slot not reclaimed after %d calls", calls)
	}
	if left := f.engineMapKeys(slot); len(left) != 0 {
		t.Fatalf("%d engine-map keys of the reclaimed slot %s left, e.g. %q", len(left), slot, left[0])
	}
	if _, ok := f.bucketCounts()[slot]; ok {
		t.Fatalf("the reclaimed slot %s still has its bucket count in fence", slot)
	}
	f.overlapsAgree()
	t.Logf("%d buckets reclaimed in %d calls", nb, calls)
}

// TestRedisLayout3Migrate: a pool written by layout 3 (this layout's keys without the bucket counts
// 'gn<slot>' and 'egn' and the entry count 'en', cfg layout 3) answers layout_mismatch; `pool migrate` only
// records this layout (and deletes layout 3-4's lc). Its slots keep 256 buckets and its event index 16,384 for life (no count: they never
// grow, however many blocks they get), and still find every block; a slot created afterwards (a Cleared
// rank) grows.
func TestRedisLayout3Migrate(t *testing.T) {
	f := newEngineMapFixture(t, 2, 64)
	f.storeChains(0, 4, 64)
	// Make it layout 3's pool: no bucket counts, no event-index entry count.
	var fields []string
	for slot := range f.bucketCounts() {
		fields = append(fields, "gn"+slot)
	}
	for _, cmd := range []rueidis.Completed{f.c.B().Hdel().Key(f.keys[5]).Field(fields...).Build(),
		f.c.B().Hdel().Key(f.keys[6]).Field("egn", "en").Build()} {
		if err := f.c.Do(f.ctx, cmd).Error(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.c.Do(f.ctx, f.c.B().Hset().Key(f.keys[0]).FieldValue().FieldValue("layout", "3").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	_, err := f.rs.Route(f.ctx, RouteRequest{Pool: "p", RequestID: "r", ISL: 16, NowMs: 1000})
	var lm *LayoutMismatchError
	if !errors.As(err, &lm) || !strings.Contains(err.Error(), "layout 3") {
		t.Fatalf("route on a layout-3 pool: %v (want layout_mismatch naming layout 3)", err)
	}
	if from, err := f.rs.MigratePool(f.ctx, "p"); err != nil || from != "3" {
		t.Fatalf("migrate: from %q, %v", from, err)
	}
	if len(f.bucketCounts()) != 0 {
		t.Fatalf("migrate gave layout 3's slots bucket counts: %v", f.bucketCounts())
	}
	// Layout 3's slot takes 1,000 more blocks at 2 per bucket without growing, and finds them all; its
	// event index (at 1/64 entry per bucket) does not grow either.
	eventIndexLoad = 1.0 / 64
	f.storeChains(1<<20, 16, 64)
	if c := f.bucketCounts(); len(c) != 0 {
		t.Fatalf("a layout-3 slot grew: %v", c)
	}
	if v, err := f.c.Do(f.ctx, f.c.B().Hget().Key(f.keys[6]).Field("egn").Build()).ToString(); !rueidis.IsRedisNil(err) {
		t.Fatalf("a layout-3 event index grew: egn %q, %v", v, err)
	}
	f.overlapsAgree()
	f.removeAll()
	// A new slot (the rank cleared) records its count and grows.
	f.apply("w0", Event{Kind: EventCleared})
	f.chains, f.seqs = nil, nil
	f.storeChains(1<<30, 12, 64)
	if _, nb := largest(f.bucketCounts()); nb <= 256 {
		t.Fatalf("the slot created after the migration did not grow: %v", f.bucketCounts())
	}
	f.overlapsAgree()
}

// TestRedisEventIndexGrows: the pool's event index splits its buckets as entries come (at 1/16 entry per
// bucket: growth past 1,024 entries, GSPLITS per call), and every reader still finds every entry: routes
// and overlaps (route.lua's event_entry) answer as the memory store's, Stored parents resolve, every block
// is removed with none unknown (the read-modify-write of entries in split buckets), and the emptied index
// leaves no bucket behind.
func TestRedisEventIndexGrows(t *testing.T) {
	f := newEngineMapFixture(t, 200, 1.0/16)
	f.storeChains(0, 200, 16)
	f.apply("w1", Event{Kind: EventStored, Blocks: f.chains[0]}) // one chain held by two workers
	nb := f.eventIndexBuckets()
	if nb < 16384+1000 {
		t.Fatalf("the event index has %d buckets after 3,200 entries at 1/16 per bucket; want > 17,384", nb)
	}
	f.overlapsAgree()
	for i, seq := range f.seqs[:20] {
		var got [2]Decision
		for j, st := range []Store{f.stores["memory"], f.stores["redis"]} {
			d, err := st.Route(f.ctx, RouteRequest{Pool: "p", RequestID: "r" + strconv.Itoa(i), SeqHashes: seq,
				ISL: int64(16 * len(seq)), Random: 0.5, NowMs: 2000 + int64(i)})
			if err != nil {
				t.Fatal(err)
			}
			got[j] = d
		}
		if got[0] != got[1] {
			t.Fatalf("route %d: memory %+v, redis %+v", i, got[0], got[1])
		}
	}
	f.removeAll()
	f.apply("w1", Event{Kind: EventRemoved, Removed: engineHashes(f.chains[0])})
	f.overlapsAgree()
	var cursor uint64
	for {
		e, err := f.c.Do(f.ctx, f.c.B().Scan().Cursor(cursor).Match(f.keys[14]+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		if len(e.Elements) > 0 {
			t.Fatalf("event index emptied, but bucket %q is left", e.Elements[0])
		}
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	if n, err := f.c.Do(f.ctx, f.c.B().Hget().Key(f.keys[6]).Field("en").Build()).AsInt64(); err != nil || n != 0 {
		t.Fatalf("event-index entry count after emptying: %d, %v (want 0)", n, err)
	}
}

// eventIndexBuckets returns the event index's bucket count (sc egn).
func (f *engineMapFixture) eventIndexBuckets() int {
	f.t.Helper()
	n, err := f.c.Do(f.ctx, f.c.B().Hget().Key(f.keys[6]).Field("egn").Build()).AsInt64()
	if err != nil {
		f.t.Fatal(err)
	}
	return int(n)
}

// engineHashes returns the blocks' engine hashes.
func engineHashes(blocks []StoredBlock) []uint64 {
	out := make([]uint64, len(blocks))
	for i, b := range blocks {
		out[i] = b.EngineHash
	}
	return out
}
