package statestore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// atomicity: 64 goroutines, each with its own client, route at once.
func checkAtomic(t *testing.T, addrs []string, pools []string) {
	ctx := context.Background()
	prefix := fmt.Sprintf("atomic%d:", nsCounter.Add(1))
	admin := newRedisStorePrefix(t, prefix, addrs...)
	for _, pool := range pools {
		cfg := statestore.DefaultPoolConfig(4)
		if err := admin.PutPool(ctx, pool, cfg); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 8; i++ {
			if err := admin.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: fmt.Sprintf("w%d", i), URL: "u"}, 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	const G, N = 64, 8
	var mu sync.Mutex
	sum := map[string]int64{}     // pool/worker → decode blocks; pool# → requests
	prefill := map[string]int64{} // pool/worker → prefill tokens booked
	type booking struct {
		pool, key string // key: pool/worker
		prefill   int64
	}
	leases := map[string]booking{} // request id → what its decision booked
	var wg sync.WaitGroup
	errs := make(chan error, G)
	for g := 0; g < G; g++ {
		st := newRedisStorePrefix(t, prefix, addrs...)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < N; i++ {
				pool := pools[(g+i)%len(pools)]
				id, isl := fmt.Sprintf("g%d-%d", g, i), 8+int64(g%5)
				d, err := st.Route(ctx, statestore.RouteRequest{Pool: pool, RequestID: id,
					SeqHashes: []uint64{1, 2}, ISL: isl, Random: float64(g) / G, NowMs: 1})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				key := pool + "/" + d.WorkerID
				sum[key] += d.RequiredBlocks
				sum[pool+"#"]++
				p := max(isl-int64(d.OverlapBlocks)*4, 0) // SPEC §6.1 (block size 4)
				prefill[key] += p
				leases[id] = booking{pool: pool, key: key, prefill: p}
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, pool := range pools {
		ws, err := admin.Workers(ctx, pool, 1)
		if err != nil {
			t.Fatal(err)
		}
		var total int64
		for _, w := range ws {
			got := w.Ranks[0].ActiveDecodeBlocks
			if got != sum[pool+"/"+w.WorkerID] {
				t.Fatalf("pool %q worker %s: booked decode blocks %d, decisions sum %d", pool, w.WorkerID, got, sum[pool+"/"+w.WorkerID])
			}
			total += w.Ranks[0].ActiveRequests
		}
		if want := sum[pool+"#"]; total != want {
			t.Fatalf("pool %q: %d active requests, want %d", pool, total, want)
		}
	}
	// Per-request leases: each request's lease releases exactly what its decision booked. Prefill of
	// every other request first, then the prefill left must be the others' sum; then every request ends
	// once (found), a second end finds nothing, and every load is back to 0.
	ids := make([]string, 0, len(leases))
	for id := range leases {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for i, id := range ids {
		if i%2 == 1 {
			continue
		}
		b := leases[id]
		if ok, err := admin.PrefillDone(ctx, b.pool, id, 1); err != nil || !ok {
			t.Fatalf("prefill_done %s: found=%v err=%v", id, ok, err)
		}
		prefill[b.key] -= b.prefill
	}
	checkLoads := func(when string, wantPrefill map[string]int64, wantDecode map[string]int64) {
		t.Helper()
		for _, pool := range pools {
			ws, err := admin.Workers(ctx, pool, 1)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				r, key := w.Ranks[0], pool+"/"+w.WorkerID
				if r.ActivePrefillTokens != wantPrefill[key] || r.ActiveDecodeBlocks != wantDecode[key] {
					t.Fatalf("%s: pool %q worker %s: prefill %d decode %d, want %d and %d", when, pool, w.WorkerID,
						r.ActivePrefillTokens, r.ActiveDecodeBlocks, wantPrefill[key], wantDecode[key])
				}
			}
		}
	}
	checkLoads("after prefill_done of half the requests", prefill, sum)
	for _, id := range ids {
		if ok, err := admin.Done(ctx, leases[id].pool, id, 1); err != nil || !ok {
			t.Fatalf("done %s: found=%v err=%v", id, ok, err)
		}
		if ok, _ := admin.Done(ctx, leases[id].pool, id, 1); ok {
			t.Fatalf("done %s twice: the second found a lease", id)
		}
	}
	checkLoads("after done of every request", nil, nil)

	// Busy threshold admitting exactly k: one worker, max_num_batched_tokens 100, busy fraction 1,
	// each request books 30 prefill tokens: admitted while booked <= 100 → 4 succeed (0,30,60,90 → 120).
	pool := pools[0] + "-busy"
	cfg := statestore.DefaultPoolConfig(4)
	cfg.BusyPrefillFraction = 1
	if err := admin.PutPool(ctx, pool, cfg); err != nil {
		t.Fatal(err)
	}
	if err := admin.PutWorker(ctx, pool, statestore.WorkerSpec{WorkerID: "only", MaxNumBatchedTokens: 100}, 0); err != nil {
		t.Fatal(err)
	}
	var ok, busy int
	for g := 0; g < G; g++ {
		st := newRedisStorePrefix(t, prefix, addrs...)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			_, err := st.Route(ctx, statestore.RouteRequest{Pool: pool, RequestID: fmt.Sprintf("b%d", g), ISL: 30, NowMs: 1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, statestore.ErrNoEligibleWorker):
				busy++
			default:
				t.Error(err)
			}
		}(g)
	}
	wg.Wait()
	if ok != 4 || busy != G-4 {
		t.Fatalf("busy threshold: %d succeeded, %d refused; want exactly 4 and %d", ok, busy, G-4)
	}
}

func TestRedisAtomicity(t *testing.T) {
	srv := sharedRedis(t)
	checkAtomic(t, []string{srv.Addr()}, []string{"default"})
}

// TestRedisCluster runs the atomicity checks on a local 3-primary cluster with pools on different slots,
// including pool names that contain hash-tag braces.
func TestRedisCluster(t *testing.T) {
	cl := testredis.StartCluster(t)
	pools := []string{"default", "a{b}c", "{x}", "}{", "pool-7", "é"}
	slots := map[uint16]bool{}
	for _, p := range pools {
		slots[slotOf(statestore.PoolKeys("kvr:", p)[0])] = true
		for _, k := range statestore.PoolKeys("kvr:", p) {
			if slotOf(k) != slotOf(statestore.PoolKeys("kvr:", p)[0]) {
				t.Fatalf("pool %q: key %q in another slot", p, k)
			}
		}
	}
	if len(slots) < 3 {
		t.Fatalf("pools landed on %d slots only", len(slots))
	}
	checkAtomic(t, cl.Addrs(), pools)
	// The differential stream on the cluster too.
	d := &differ{t: t, a: statestore.NewMemory(), b: newRedisStore(t, cl.Addrs()...)}
	steps := 3000
	if testing.Short() {
		steps = 600
	}
	g := newGen(42)
	runDiff(t, d, g, steps)
	t.Logf("coverage: %+v", g.cov)
}

// slotOf is Redis Cluster's key slot (CRC16/XMODEM of the hash tag or key, mod 16384).
func slotOf(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
