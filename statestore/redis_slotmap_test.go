package statestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// TestRedisColdSlotMap: route finds the roster position of each slot it meets (an overlap holder's, the
// load order's head) through a map that lives in the Lua VM (lib.lua rlive). On a cold VM — a restart, a
// failover, a new library; FUNCTION LOAD REPLACE here — the map is rebuilt one chunk at a time from the
// slots' worker hints (fence field 'w<slot>'), or from every chunk when a slot has no hint (a pool
// written before the hints). Decisions must match the memory store's whether the map is warm, cold with
// hints or cold without them, with dead slots (removed workers, engine restarts) still in the index; and
// a cold route with hints must not read every chunk (no MGET: rch_all's).
func TestRedisColdSlotMap(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	const prefix = "coldmap:"
	rs := newRedisStorePrefix(t, prefix, srv.Addr())
	stores := []statestore.Store{statestore.NewMemory(), rs}
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", statestore.DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	fence := statestore.PoolKeys(prefix, "p")[5]
	mgets := func() int64 {
		s, err := c.Do(ctx, c.B().Info().Section("commandstats").Build()).ToString()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(s, "\n") {
			if rest, ok := strings.CutPrefix(line, "cmdstat_mget:calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				return n
			}
		}
		return 0
	}
	// dropHints deletes every slot hint and returns them (restored after the route: a pool written before
	// the hints has none for its older slots, and new slots get theirs).
	dropHints := func() map[string]string {
		m, err := c.Do(ctx, c.B().Hgetall().Key(fence).Build()).AsStrMap()
		if err != nil {
			t.Fatal(err)
		}
		hints := map[string]string{}
		for f, v := range m {
			if strings.HasPrefix(f, "w") {
				if err := c.Do(ctx, c.B().Hdel().Key(fence).Field(f).Build()).Error(); err != nil {
					t.Fatal(err)
				}
				hints[f] = v
			}
		}
		return hints
	}
	restoreHints := func(hints map[string]string) {
		for f, v := range hints {
			if err := c.Do(ctx, c.B().Hset().Key(fence).FieldValue().FieldValue(f, v).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
	}

	r := rand.New(rand.NewPCG(5, 15))
	var now int64 = 1000
	dp := map[string]int{}
	epoch := map[string]int{}
	put := func(id string, n int) {
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: n, TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, now); err != nil {
				t.Fatal(err)
			}
		}
		dp[id] = n
	}
	// Chains: 24 prompts of 6 blocks; a worker's rank stores some of them (engine hashes its own).
	const chains, depth = 24, 6
	seqs := make([][]uint64, chains)
	for k := range seqs {
		local := make([]uint64, depth)
		for j := range local {
			local[j] = uint64(k*100 + j + 1)
		}
		seqs[k] = blockhash.Sequence(nil, local)
	}
	store := func(id string, rank, k int) {
		blocks := make([]statestore.StoredBlock, depth)
		for j := range blocks {
			blocks[j] = statestore.StoredBlock{EngineHash: uint64(epoch[id]+1)<<40 | uint64(len(id))<<32 | uint64(rank)<<24 | uint64(k*100+j+1), LocalHash: uint64(k*100 + j + 1)}
		}
		ev := statestore.Event{DPRank: rank, Epoch: "e" + strconv.Itoa(epoch[id]), Kind: statestore.EventStored, Blocks: blocks}
		for _, s := range stores {
			if _, err := s.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: id, Events: []statestore.Event{ev}, NowMs: now}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var ids []string
	for i := 0; i < 240; i++ {
		ids = append(ids, fmt.Sprintf("w%03x", r.IntN(4096)))
	}
	r.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	for _, id := range ids {
		put(id, 1+r.IntN(3))
	}
	for id, n := range dp {
		for rank := 0; rank < n; rank++ {
			for q := 0; q < 2; q++ {
				store(id, rank, r.IntN(chains))
			}
		}
	}
	var open []string
	nreq, cold, hintless := 0, 0, 0
	route := func(mode string) {
		t.Helper()
		nreq++
		k := r.IntN(chains)
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", nreq), SeqHashes: seqs[k][:1+r.IntN(depth)],
			ISL: int64(16 * depth), Random: r.Float64(), NowMs: now}
		var hints map[string]string
		switch mode {
		case "cold", "hintless":
			if mode == "hintless" {
				if hints = dropHints(); len(hints) == 0 {
					t.Fatal("no slot hints in the fence hash")
				}
			}
			if err := rs.LoadLibrary(ctx); err != nil { // a new library: every memo of the VM starts empty
				t.Fatal(err)
			}
		}
		before := mgets()
		routeAlike(t, ctx, stores, req)
		read := mgets() - before
		restoreHints(hints)
		switch {
		case mode == "cold" && read != 0:
			t.Fatalf("%s: a cold route with slot hints read every roster chunk (%d MGET)", req.RequestID, read)
		case mode == "cold":
			cold++
		case mode == "hintless" && read > 0:
			hintless++ // (the fallback reads every chunk when it meets a slot without a hint)
		}
		open = append(open, req.RequestID)
	}
	for j := 0; j < 360; j++ {
		now += 10
		switch m := j % 6; {
		case m == 0:
			route("cold")
		case m == 3 && j%12 == 3:
			route("hintless")
		default:
			route("warm")
		}
		switch r.IntN(8) {
		case 0: // a removal: its slots are dead until reclaimed, still in index entries
			var live []string
			for id := range dp {
				live = append(live, id)
			}
			id := live[r.IntN(len(live))]
			for _, s := range stores {
				if err := s.RemoveWorker(ctx, "p", id, now); err != nil {
					t.Fatal(err)
				}
			}
			delete(dp, id)
		case 1: // an engine restart of one rank: a new slot, the old one dead
			var live []string
			for id := range dp {
				live = append(live, id)
			}
			id := live[r.IntN(len(live))]
			epoch[id]++
			store(id, r.IntN(dp[id]), r.IntN(chains))
		case 2: // a new worker with some of the prompts
			id := fmt.Sprintf("n%03d", j)
			put(id, 1+r.IntN(2))
			store(id, 0, r.IntN(chains))
		}
		if len(open) > 8 {
			for _, id := range open[:4] {
				for _, s := range stores {
					if _, err := s.Done(ctx, "p", id, now); err != nil {
						t.Fatal(err)
					}
				}
			}
			open = open[4:]
		}
	}
	if cold == 0 || hintless == 0 {
		t.Fatalf("cold routes with hints %d, hint-less ones that read every chunk %d: both paths must run", cold, hintless)
	}
}
