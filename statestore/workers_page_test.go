package statestore_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/statestore"
)

// TestWorkersPageRankBound (issue 15, SPEC §8): a page of GET /v1/workers is bounded by ranks as well as
// workers. 300 workers of 1..8 dp ranks and two of more than MaxWorkersPageRanks ranks (each alone on its
// page), with loads, fences, held blocks and health on some of them, are paged with several limits; both
// stores must give identical pages (Redis: workers.lua's packed reply decoded by decodeWorkersPage), and
// every page must follow the documented rule: at most limit workers; at most MaxWorkersPageRanks ranks
// unless it holds one worker; and full, i.e. the next page's first worker did not fit (the page had limit
// workers, or that worker's ranks would have taken it past the bound).
func TestWorkersPageRankBound(t *testing.T) {
	srv := sharedRedis(t)
	ctx := context.Background()
	stores := []statestore.Store{statestore.NewMemory(), newRedisStore(t, srv.Addr())}
	for _, s := range stores {
		if err := s.PutPool(ctx, "p", statestore.DefaultPoolConfig(16)); err != nil {
			t.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(15, 128))
	dp := map[string]int{}
	var ids []string
	for i := 0; i < 300; i++ {
		id := fmt.Sprintf("w%03d", r.IntN(1000))
		if _, ok := dp[id]; ok {
			continue
		}
		dp[id] = 1 + r.IntN(8)
		ids = append(ids, id)
	}
	dp["w0big"], dp["w5big"] = statestore.MaxWorkersPageRanks+3, 2*statestore.MaxWorkersPageRanks
	ids = append(ids, "w0big", "w5big")
	var now int64 = 1000
	for _, id := range ids {
		spec := statestore.WorkerSpec{WorkerID: id, URL: "http://" + id, DPSize: dp[id], TotalKVBlocks: 1000, MaxNumBatchedTokens: 512}
		for _, s := range stores {
			if err := s.PutWorker(ctx, "p", spec, now); err != nil {
				t.Fatal(err)
			}
		}
	}
	// some state on the listed fields: loads (routes), fences and held blocks (events), health (failures)
	for k := 0; k < 60; k++ {
		id := ids[r.IntN(len(ids))]
		req := statestore.RouteRequest{Pool: "p", RequestID: fmt.Sprintf("r%d", k), ISL: int64(r.IntN(200)), PinnedWorker: id, NowMs: now}
		routeAlike(t, ctx, stores, req)
		ev := statestore.Event{DPRank: r.IntN(dp[id]), EventID: uint64(k + 1), HasEventID: true, Epoch: fmt.Sprintf("e%d", k%3),
			Kind: statestore.EventStored, Blocks: []statestore.StoredBlock{{EngineHash: uint64(k + 1), LocalHash: uint64(k + 7)}}}
		for _, s := range stores {
			if _, err := s.ApplyEvents(ctx, statestore.EventBatch{Pool: "p", WorkerID: id, Events: []statestore.Event{ev}, NowMs: now}); err != nil {
				t.Fatal(err)
			}
			if k%7 == 0 {
				if _, err := s.ReportForward(ctx, "p", id, false, now); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	workersAlike(t, ctx, stores, now, "after setup")

	for _, limit := range []int{0, 1, 7, 32, 100, statestore.MaxWorkersPage} {
		want := limit
		if want == 0 {
			want = statestore.DefaultWorkersPage
		}
		var pages [][]statestore.WorkerInfo
		for si, s := range stores {
			q := statestore.WorkersQuery{Limit: limit}
			for p := 0; ; p++ {
				pg, err := s.ListWorkers(ctx, "p", q, now)
				if err != nil {
					t.Fatal(err)
				}
				if si == 0 {
					pages = append(pages, pg.Workers)
				} else if p >= len(pages) || !reflect.DeepEqual(pg.Workers, pages[p]) {
					t.Fatalf("limit %d, page %d: the stores differ", limit, p)
				}
				ranks := 0
				for _, w := range pg.Workers {
					ranks += len(w.Ranks)
				}
				if len(pg.Workers) == 0 || len(pg.Workers) > want || (len(pg.Workers) > 1 && ranks > statestore.MaxWorkersPageRanks) {
					t.Fatalf("limit %d, page %d: %d workers, %d ranks", limit, p, len(pg.Workers), ranks)
				}
				if pg.Next == "" {
					if si == 1 && p != len(pages)-1 {
						t.Fatalf("limit %d: redis ends after page %d, memory after %d", limit, p, len(pages)-1)
					}
					break
				}
				if pg.Next != pg.Workers[len(pg.Workers)-1].WorkerID {
					t.Fatalf("limit %d, page %d: next %q is not the page's last worker", limit, p, pg.Next)
				}
				first := "" // the next page's first worker, which did not fit
				for _, id := range ids {
					if id > pg.Next && (first == "" || id < first) {
						first = id
					}
				}
				nextDP := dp[first]
				if len(pg.Workers) < want && ranks+nextDP <= statestore.MaxWorkersPageRanks {
					t.Fatalf("limit %d, page %d: %d workers, %d ranks, but the next worker %q (%d ranks) fits", limit, p, len(pg.Workers), ranks, first, nextDP)
				}
				q.After = pg.Next
			}
		}
		listed := 0
		for _, pg := range pages {
			listed += len(pg)
		}
		if listed != len(ids) {
			t.Fatalf("limit %d: %d workers listed, want %d", limit, listed, len(ids))
		}
	}
}
