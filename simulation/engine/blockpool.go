package engine

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"
)

// engineHashDomain separates engine hashes from kvrouter's sequence hashes even with salt 0.
const engineHashDomain uint64 = 0x656e67696e652d31 // "engine-1"

// none marks the absence of a slot in the free-queue links.
const none int32 = -1

// slot is one physical KV block holding a cached (hashed) block.
type slot struct {
	seq, local, engine uint64
	ref                int32 // requests holding the block; 0 = cached but evictable
	prev, next         int32 // free-queue links while ref == 0
}

// BlockPool is a fixed set of KV blocks with prefix caching, modelled on vLLM v1's KV cache manager.
//
// A cached block is named by its sequence hash (which names its whole prefix). Requests take
// references on the blocks of their prompt; a block nobody references stays cached and evictable.
// Evictable blocks sit in a free queue in LRU order of release (vLLM's FreeKVCacheBlockQueue); a
// release appends a request's blocks tail first, so a prefix is evicted from its leaf towards its
// root. Allocation uses never-used (or freed private) blocks first and evicts from the queue's head
// only when none is left: eviction happens only under capacity pressure.
//
// Private blocks are anonymous blocks a request holds but that are never cached: the partial last
// block of a prompt and the blocks of generated tokens. (vLLM also caches full blocks of generated
// tokens, but their hashes can never match a trace-derived prompt, so here they are freed at once.)
//
// Every change to the set of cached blocks is published to the EventSink: Removed when blocks are
// evicted, then Stored for each contiguous run of newly cached blocks. Not safe for concurrent use.
type BlockPool struct {
	capacity  int
	salt      uint64
	sink      EventSink
	slots     []slot   // capacity slots, then the free-queue sentinel at index capacity
	index     seqIndex // sequence hash → slot
	unused    []int32  // slots holding no cached block (a stack)
	private   int      // private blocks held
	evictable int      // cached blocks with ref == 0 (the free queue's length)

	found   []int32 // scratch: the slot of each block of one call, none while not cached
	pending []Event
}

// NewBlockPool returns an empty pool of capacity blocks whose engine hashes are salted with salt
// (give every simulated engine its own). sink may be nil. It panics if capacity is not in
// [1, MaxInt32-1].
func NewBlockPool(capacity int, salt uint64, sink EventSink) *BlockPool {
	if capacity < 1 || capacity >= math.MaxInt32 {
		panic(fmt.Sprintf("engine: block pool capacity %d out of range", capacity))
	}
	p := &BlockPool{
		capacity: capacity,
		salt:     salt,
		sink:     sink,
		slots:    make([]slot, capacity+1),
		index:    newSeqIndex(capacity),
		unused:   make([]int32, capacity),
	}
	for i := range p.unused {
		p.unused[i] = int32(capacity - 1 - i) // pop order 0, 1, 2, ...
	}
	s := int32(capacity)
	p.slots[s].prev, p.slots[s].next = s, s
	return p
}

// Capacity is the pool's size in blocks.
func (p *BlockPool) Capacity() int { return p.capacity }

// Cached is the number of cached blocks, referenced or evictable.
func (p *BlockPool) Cached() int { return p.index.len() }

// Used is the number of blocks that cannot be evicted: referenced cached blocks plus private blocks.
// Used/Capacity is vLLM's kv_cache_usage.
func (p *BlockPool) Used() int { return p.index.len() - p.evictable + p.private }

// Available is the number of blocks an allocation could obtain now: free blocks plus evictable ones.
func (p *BlockPool) Available() int { return len(p.unused) - p.private + p.evictable }

// EngineHash returns the opaque engine hash this pool publishes for a sequence hash:
// XXH3-64(le_u64(seq)) seeded with the pool's salt (domain-separated from kvrouter's hashes).
func (p *BlockPool) EngineHash(seq uint64) uint64 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], seq)
	return xxh3.HashSeed(b[:], p.salt^engineHashDomain)
}

// CachedPrefix returns how many leading blocks of seqHashes are cached, without touching anything.
func (p *BlockPool) CachedPrefix(seqHashes []uint64) int {
	for i, h := range seqHashes {
		if _, ok := p.index.get(h); !ok {
			return i
		}
	}
	return len(seqHashes)
}

// Acquire references the chain of blocks seqHashes (with their local hashes, same length) for a new
// request: the longest cached prefix is a cache hit, the rest is allocated and cached, evicting least
// recently released unreferenced blocks if needed. It returns the number of hit blocks. If not enough
// blocks can be freed, it returns ok false and changes nothing.
func (p *BlockPool) Acquire(seqHashes, localHashes []uint64) (cachedBlocks int, ok bool) {
	return p.Extend(0, seqHashes, localHashes, 0)
}

// Extend is Acquire for a request that already holds seqHashes[:held] (from earlier calls): it
// references seqHashes[held:] and changes the request's private blocks by privateDelta (negative
// frees them first, e.g. when a partial block fills up and becomes cached), atomically. cachedBlocks
// counts the leading blocks of seqHashes[held:] that were already cached. A block found cached after
// a miss (possible only for chains that are not prefix-closed) is referenced too and splits the
// Stored event. ok false: not enough blocks, nothing changed. It panics on misuse (a caller bug):
// held out of range, slices of different lengths, or freeing more private blocks than held.
func (p *BlockPool) Extend(held int, seqHashes, localHashes []uint64, privateDelta int) (cachedBlocks int, ok bool) {
	return p.extend(held, seqHashes, localHashes, privateDelta, nil)
}

// extend is Extend that, on success, also appends the slots of seqHashes[held:] to *slots (when not
// nil), so that the engine can release them without hash lookups.
func (p *BlockPool) extend(held int, seqHashes, localHashes []uint64, privateDelta int, slots *[]int32) (cachedBlocks int, ok bool) {
	if held < 0 || held > len(seqHashes) || len(localHashes) != len(seqHashes) {
		panic(fmt.Sprintf("engine: Extend(held %d, %d seq hashes, %d local hashes)", held, len(seqHashes), len(localHashes)))
	}
	if -privateDelta > p.private {
		panic(fmt.Sprintf("engine: Extend frees %d private blocks, %d held", -privateDelta, p.private))
	}
	// Phase 1: look every block up once and count; change nothing. A duplicate hash inside one call
	// is counted twice (a conservative capacity check; chained sequence hashes never repeat).
	todo := seqHashes[held:]
	p.found = slices.Grow(p.found[:0], len(todo))[:len(todo)]
	leading, misses, evictableHits := 0, 0, 0
	for i, h := range todo {
		idx, cached := p.index.get(h)
		switch {
		case !cached:
			idx = none
			misses++
		case p.slots[idx].ref == 0:
			evictableHits++
		}
		if cached && misses == 0 {
			leading++
		}
		p.found[i] = idx
	}
	need := misses + max(privateDelta, 0)
	free := len(p.unused) - p.private - min(privateDelta, 0)
	if need > free+p.evictable-evictableHits {
		return 0, false
	}

	// Phase 2: reference the hits first, so that allocation cannot evict them.
	p.private += min(privateDelta, 0)
	for _, idx := range p.found {
		if idx != none {
			p.ref(idx)
		}
	}
	// Phase 3: allocate and cache the misses, grouping contiguous runs into one Stored event each.
	p.pending = p.pending[:0]
	var removed []uint64
	if evictions := need - free; evictions > 0 {
		removed = make([]uint64, 0, evictions) // allocation takes free blocks first, then evicts
	}
	var run *Event
	for i, h := range todo {
		if p.found[i] != none {
			run = nil
			continue
		}
		if idx, cached := p.index.get(h); cached { // a duplicate cached earlier in this call
			p.ref(idx)
			p.found[i] = idx
			run = nil
			continue
		}
		if run == nil {
			ev := Event{Kind: EventStored, Blocks: make([]StoredBlock, 0, len(todo)-i)}
			switch {
			case i > 0:
				ev.ParentEngineHash, ev.HasParent = p.slots[p.found[i-1]].engine, true
			case held > 0:
				parent, ok := p.index.get(seqHashes[held-1])
				if !ok {
					panic(fmt.Sprintf("engine: Extend: held block %d of position %d is not cached", seqHashes[held-1], held-1))
				}
				ev.ParentEngineHash, ev.HasParent = p.slots[parent].engine, true
			}
			p.pending = append(p.pending, ev)
			run = &p.pending[len(p.pending)-1]
		}
		idx := p.allocSlot(&removed)
		sl := &p.slots[idx]
		*sl = slot{seq: h, local: localHashes[held+i], engine: p.EngineHash(h), ref: 1, prev: none, next: none}
		p.index.put(h, idx)
		p.found[i] = idx
		run.Blocks = append(run.Blocks, StoredBlock{EngineHash: sl.engine, LocalHash: sl.local})
	}
	for range max(privateDelta, 0) {
		if len(p.unused)-p.private == 0 {
			p.unused = append(p.unused, p.evict(&removed))
		}
		p.private++
	}
	if slots != nil {
		*slots = append(*slots, p.found...)
	}
	if p.sink != nil {
		if len(removed) > 0 {
			p.sink(Event{Kind: EventRemoved, EngineHashes: removed})
		}
		for _, ev := range p.pending {
			p.sink(ev)
		}
	}
	return leading, true
}

// Release drops one reference on each block of seqHashes. Blocks nobody references any more stay
// cached and join the free queue, tail first (so the prefix's leaf is evicted before its root).
// It panics if a block is not held (a caller bug).
func (p *BlockPool) Release(seqHashes []uint64) {
	for i := len(seqHashes) - 1; i >= 0; i-- {
		idx, ok := p.index.get(seqHashes[i])
		if !ok || p.slots[idx].ref == 0 {
			panic(fmt.Sprintf("engine: Release of block %d that is not held", seqHashes[i]))
		}
		p.unref(idx)
	}
}

// releaseSlots is Release by slot, for blocks the caller knows it holds (in chain order).
func (p *BlockPool) releaseSlots(slots []int32) {
	for i := len(slots) - 1; i >= 0; i-- {
		if p.slots[slots[i]].ref <= 0 {
			panic(fmt.Sprintf("engine: release of slot %d that is not held", slots[i]))
		}
		p.unref(slots[i])
	}
}

// unref drops one reference; an unreferenced block joins the free queue's tail.
func (p *BlockPool) unref(idx int32) {
	s := &p.slots[idx]
	s.ref--
	if s.ref == 0 {
		p.pushTail(idx)
	}
}

// FreePrivate returns n private blocks to the pool. It panics if fewer are held (a caller bug).
func (p *BlockPool) FreePrivate(n int) {
	if n < 0 || n > p.private {
		panic(fmt.Sprintf("engine: FreePrivate(%d) with %d private blocks", n, p.private))
	}
	p.private -= n
}

// Resident returns the sequence hashes of every cached block, sorted ascending.
func (p *BlockPool) Resident() []uint64 {
	out := make([]uint64, 0, p.index.len())
	p.index.each(func(h uint64) { out = append(out, h) })
	slices.Sort(out)
	return out
}

// Dump describes the pool for test failures: counts, the free queue in eviction order, and the
// referenced blocks (sorted) with their reference counts.
func (p *BlockPool) Dump() string {
	var b strings.Builder
	fmt.Fprintf(&b, "capacity %d cached %d used %d private %d evictable %d\nfree queue (evicted first):",
		p.capacity, p.index.len(), p.Used(), p.private, p.evictable)
	sentinel := int32(p.capacity)
	for i := p.slots[sentinel].next; i != sentinel; i = p.slots[i].next {
		fmt.Fprintf(&b, " %d", p.slots[i].seq)
	}
	b.WriteString("\nreferenced:")
	for _, h := range p.Resident() {
		if idx, _ := p.index.get(h); p.slots[idx].ref > 0 {
			fmt.Fprintf(&b, " %d×%d", h, p.slots[idx].ref)
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// ref takes one reference, unlinking the block from the free queue if it was evictable.
func (p *BlockPool) ref(idx int32) {
	s := &p.slots[idx]
	if s.ref == 0 {
		p.unlink(idx)
	}
	s.ref++
}

// allocSlot returns a slot for a new cached block: an unused one if any is free, else the evicted
// head of the free queue (its engine hash appended to removed).
func (p *BlockPool) allocSlot(removed *[]uint64) int32 {
	if len(p.unused)-p.private > 0 {
		idx := p.unused[len(p.unused)-1]
		p.unused = p.unused[:len(p.unused)-1]
		return idx
	}
	return p.evict(removed)
}

// evict removes the least recently released evictable block and returns its slot.
func (p *BlockPool) evict(removed *[]uint64) int32 {
	idx := p.slots[p.capacity].next
	if idx == int32(p.capacity) {
		panic("engine: evict from an empty free queue (capacity check is wrong)")
	}
	p.unlink(idx)
	s := &p.slots[idx]
	p.index.del(s.seq)
	*removed = append(*removed, s.engine)
	return idx
}

func (p *BlockPool) pushTail(idx int32) {
	sentinel := int32(p.capacity)
	last := p.slots[sentinel].prev
	p.slots[idx].prev, p.slots[idx].next = last, sentinel
	p.slots[last].next = idx
	p.slots[sentinel].prev = idx
	p.evictable++
}

func (p *BlockPool) unlink(idx int32) {
	s := &p.slots[idx]
	p.slots[s.prev].next = s.next
	p.slots[s.next].prev = s.prev
	s.prev, s.next = none, none
	p.evictable--
}
