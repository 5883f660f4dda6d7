package engine

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// chain returns a request's hashes: local hashes are the given ids, sequence hashes a simple chain
// (the pool only needs them to be distinct per prefix).
func chain(ids ...uint64) (seq, local []uint64) {
	var h uint64
	for i, id := range ids {
		if i == 0 {
			h = id
		} else {
			h = h*1_000_003 + id
		}
		seq = append(seq, h)
		local = append(local, id)
	}
	return seq, local
}

// replay applies events to a naive set of engine hashes and checks every reference is consistent.
type replay struct {
	t     *testing.T
	set   map[uint64]bool
	log   []Event
	evict int
}

func newReplay(t *testing.T) *replay { return &replay{t: t, set: map[uint64]bool{}} }

func (r *replay) sink(ev Event) {
	r.t.Helper()
	r.log = append(r.log, ev)
	switch ev.Kind {
	case EventStored:
		if len(ev.Blocks) == 0 {
			r.t.Fatal("empty Stored event")
		}
		if ev.HasParent && !r.set[ev.ParentEngineHash] {
			r.t.Fatalf("Stored with unknown parent %d", ev.ParentEngineHash)
		}
		for _, b := range ev.Blocks {
			if r.set[b.EngineHash] {
				r.t.Fatalf("block %d stored twice", b.EngineHash)
			}
			r.set[b.EngineHash] = true
		}
	case EventRemoved:
		for _, h := range ev.EngineHashes {
			if !r.set[h] {
				r.t.Fatalf("removed block %d was never stored", h)
			}
			delete(r.set, h)
			r.evict++
		}
	default:
		r.t.Fatalf("unknown event kind %d", ev.Kind)
	}
}

// check compares the replayed set with the pool's resident blocks.
func (r *replay) check(p *BlockPool) {
	r.t.Helper()
	res := p.Resident()
	if len(res) != len(r.set) {
		r.t.Fatalf("replayed %d blocks, pool holds %d\n%s", len(r.set), len(res), p.Dump())
	}
	for _, h := range res {
		if !r.set[p.EngineHash(h)] {
			r.t.Fatalf("resident block %d never stored (or removed)", h)
		}
	}
}

func TestPrefixReuse(t *testing.T) {
	r := newReplay(t)
	p := NewBlockPool(16, 1, r.sink)
	a, al := chain(1, 2, 3, 4)
	if hit, ok := p.Acquire(a, al); !ok || hit != 0 {
		t.Fatalf("cold acquire: hit %d ok %v", hit, ok)
	}
	if len(r.log) != 1 || r.log[0].HasParent || len(r.log[0].Blocks) != 4 {
		t.Fatalf("want one root Stored of 4 blocks, got %+v", r.log)
	}
	b, bl := chain(1, 2, 3, 9, 10)
	hit, ok := p.Acquire(b, bl) // shares 3 blocks while a still holds them
	if !ok || hit != 3 {
		t.Fatalf("shared prefix: hit %d ok %v", hit, ok)
	}
	ev := r.log[1]
	if !ev.HasParent || ev.ParentEngineHash != p.EngineHash(a[2]) || len(ev.Blocks) != 2 ||
		ev.Blocks[0].LocalHash != 9 || ev.Blocks[1].EngineHash != p.EngineHash(b[4]) {
		t.Fatalf("continuation Stored: %+v", ev)
	}
	p.Release(a)
	p.Release(b)
	if p.Used() != 0 || p.Cached() != 6 {
		t.Fatalf("after release: %s", p.Dump())
	}
	if hit, ok := p.Acquire(a, al); !ok || hit != 4 {
		t.Fatalf("reacquire after release: hit %d ok %v", hit, ok)
	}
	if len(r.log) != 2 {
		t.Fatalf("a full hit must emit nothing, got %+v", r.log[2:])
	}
	r.check(p)
}

func TestEngineHashesOpaque(t *testing.T) {
	p1, p2 := NewBlockPool(4, 1, nil), NewBlockPool(4, 2, nil)
	for _, h := range []uint64{0, 1, 42, 1 << 63} {
		if p1.EngineHash(h) == h || p1.EngineHash(h) == p2.EngineHash(h) {
			t.Fatalf("engine hash of %d is not opaque per engine", h)
		}
	}
}

// Eviction happens only when no free block is left, and then leaf first, in LRU order of release.
func TestEvictionOnlyUnderPressure(t *testing.T) {
	r := newReplay(t)
	p := NewBlockPool(6, 0, r.sink)
	a, al := chain(1, 2, 3)
	b, bl := chain(7, 8)
	p.Acquire(a, al)
	p.Release(a) // free queue: a3 a2 a1
	p.Acquire(b, bl)
	p.Release(b) // free queue: a3 a2 a1 b2 b1 ; one block never used
	if r.evict != 0 || p.Cached() != 5 {
		t.Fatalf("evicted with free blocks left: %s", p.Dump())
	}
	c, cl := chain(20, 21)
	if _, ok := p.Acquire(c, cl); !ok {
		t.Fatal(p.Dump())
	}
	// One block was free, one had to go: the leaf of the least recently released prefix.
	if r.evict != 1 || p.CachedPrefix(a) != 2 || p.CachedPrefix(b) != 2 {
		t.Fatalf("want exactly a's leaf evicted: %s", p.Dump())
	}
	last := r.log[len(r.log)-2]
	if last.Kind != EventRemoved || len(last.EngineHashes) != 1 || last.EngineHashes[0] != p.EngineHash(a[2]) {
		t.Fatalf("Removed must precede Stored and name a's leaf: %+v", r.log)
	}
	// Touching a's prefix makes it recent: b goes next, leaf first.
	p.Acquire(a[:2], al[:2])
	p.Release(a[:2])
	d, dl := chain(30)
	p.Acquire(d, dl)
	if p.CachedPrefix(b) != 1 || p.CachedPrefix(a) != 2 {
		t.Fatalf("LRU order broken: %s", p.Dump())
	}
	r.check(p)
}

func TestAcquireFailsWithoutChange(t *testing.T) {
	r := newReplay(t)
	p := NewBlockPool(4, 0, r.sink)
	a, al := chain(1, 2, 3)
	p.Acquire(a, al) // held: nothing evictable
	before := p.Dump()
	b, bl := chain(5, 6)
	if _, ok := p.Acquire(b, bl); ok {
		t.Fatal("acquired 2 blocks with 1 free")
	}
	if _, ok := p.Extend(0, nil, nil, 2); ok {
		t.Fatal("reserved 2 private blocks with 1 free")
	}
	if p.Dump() != before || len(r.log) != 1 {
		t.Fatalf("failed acquire changed the pool:\n%s\nwas\n%s", p.Dump(), before)
	}
	// A hit on an evictable block takes it out of the evictable set: with a1..a3 evictable and one
	// block free, a1 plus 4 new blocks cannot fit (4 > 1 free + 3 evictable − a1).
	p.Release(a)
	x, xl := chain(1, 40, 41, 42, 43)
	if hit, ok := p.Acquire(x, xl); ok {
		t.Fatalf("acquired 5 blocks in a pool of 4: hit %d\n%s", hit, p.Dump())
	}
	y, yl := chain(1, 40, 41)
	if hit, ok := p.Acquire(y, yl); !ok || hit != 1 {
		t.Fatalf("hit %d ok %v\n%s", hit, ok, p.Dump())
	}
	r.check(p)
}

func TestPrivateBlocks(t *testing.T) {
	r := newReplay(t)
	p := NewBlockPool(4, 0, r.sink)
	a, al := chain(1, 2)
	p.Acquire(a, al)
	p.Release(a)
	if _, ok := p.Extend(0, nil, nil, 3); !ok { // 2 free + evict a2
		t.Fatal(p.Dump())
	}
	if p.Used() != 3 || p.Cached() != 1 || r.evict != 1 || p.Available() != 1 {
		t.Fatalf("private reservation: %s", p.Dump())
	}
	// A partial block filling up: one private block becomes the cached block b1, atomically.
	b, bl := chain(9)
	if _, ok := p.Extend(0, b, bl, -1); !ok {
		t.Fatal(p.Dump())
	}
	if p.Used() != 3 || p.Cached() != 2 {
		t.Fatalf("conversion: %s", p.Dump())
	}
	p.FreePrivate(2)
	p.Release(b)
	if p.Used() != 0 {
		t.Fatal(p.Dump())
	}
	r.check(p)
}

// Random workload: the replayed event stream always matches the pool, references balance, and the
// same inputs give the same events.
func TestPoolEventsRandom(t *testing.T) {
	run := func() []Event {
		r := newReplay(t)
		p := NewBlockPool(64, 3, r.sink)
		rng := rand.New(rand.NewPCG(5, 6))
		type held struct{ seq []uint64 }
		var live []held
		for step := range 5000 {
			if len(live) > 0 && (rng.IntN(2) == 0 || len(live) > 6) {
				i := rng.IntN(len(live))
				p.Release(live[i].seq)
				live = slices.Delete(live, i, i+1)
			} else {
				n := 1 + rng.IntN(12)
				ids := make([]uint64, n)
				for j := range ids {
					ids[j] = uint64(rng.IntN(3)) // a small alphabet: many shared prefixes
				}
				seq, local := chain(ids...)
				if _, ok := p.Acquire(seq, local); ok {
					live = append(live, held{seq})
				}
			}
			if step%97 == 0 {
				r.check(p)
			}
		}
		for _, h := range live {
			p.Release(h.seq)
		}
		r.check(p)
		if p.Used() != 0 || r.evict == 0 {
			t.Fatalf("used %d after releasing all, %d evictions", p.Used(), r.evict)
		}
		return r.log
	}
	a, b := run(), run()
	if !slices.EqualFunc(a, b, eventEqual) {
		t.Fatal("same inputs, different event streams")
	}
}

func eventEqual(a, b Event) bool {
	return a.Kind == b.Kind && a.HasParent == b.HasParent && a.ParentEngineHash == b.ParentEngineHash &&
		slices.Equal(a.Blocks, b.Blocks) && slices.Equal(a.EngineHashes, b.EngineHashes)
}

func TestPoolMisusePanics(t *testing.T) {
	for name, f := range map[string]func(p *BlockPool){
		"release unheld":      func(p *BlockPool) { p.Release([]uint64{1}) },
		"free private":        func(p *BlockPool) { p.FreePrivate(1) },
		"mismatched lengths":  func(p *BlockPool) { p.Acquire([]uint64{1}, nil) },
		"held beyond the end": func(p *BlockPool) { p.Extend(2, []uint64{1}, []uint64{1}, 0) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: want a panic", name)
				}
			}()
			f(NewBlockPool(2, 0, nil))
		}()
	}
}
