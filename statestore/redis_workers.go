package statestore

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

// ListWorkers implements Store: one workers.lua call of O(ranks listed), at most MaxWorkersPageRanks ranks
// unless one worker has more (WorkersQuery.limit and the rank rule there).
func (r *Redis) ListWorkers(ctx context.Context, pool string, q WorkersQuery, now int64) (WorkerPage, error) {
	arr, err := r.exec(ctx, luascripts.Workers, pool, []string{istr(now), q.After, strconv.Itoa(q.limit()), strconv.Itoa(MaxWorkersPageRanks)})
	if err != nil {
		return WorkerPage{}, err
	}
	if msgStr(arr[0]) == "unknown_pool" {
		return WorkerPage{}, unknownPool(pool)
	}
	out, healths, err := decodeWorkersPage(arr)
	if err != nil {
		return WorkerPage{}, fmt.Errorf("statestore: redis workers of pool %q: %w", pool, err)
	}
	if len(out) > 0 {
		cfg, err := r.GetPool(ctx, pool)
		if err != nil {
			return WorkerPage{}, err
		}
		for i := range out {
			w := &out[i]
			w.KVEventsEffective = cfg.KVEvents
			if w.KVEvents != nil {
				w.KVEventsEffective = *w.KVEvents
			}
			w.Live = cfg.WorkerTTLMs == 0 || now < w.LastSeenMs+cfg.WorkerTTLMs
			w.Health = healths[i].info(now, cfg.UnhealthyAfter)
		}
	}
	dead, _ := arr[wpDead].AsInt64()
	return WorkerPage{Workers: out, Next: msgStr(arr[1]), ReclaimPending: int(dead)}, nil
}

// rosterRec mirrors lib.lua's roster record RREC ('>I4I4I4ddbI4I4I4I4', RW bytes; ROFF its offsets): one
// candidate of the roster, as workers.lua copies them into its reply. The string offsets (worker id, url)
// point into the chunk's strings area, which the reply does not carry: the page lists the strings per worker.
type rosterRec struct {
	slot, rid, rank uint32
	mnbt, tkv       float64 // max_num_batched_tokens, total_kv_blocks
	kve             int8    // kv_events: -1 pool default, 0, 1
}

// Offsets within a roster record, lib.lua's RW and ROFF.
const (
	rrecRID  = 4
	rrecRank = 8
	rrecMNBT = 12
	rrecTKV  = 20
	rrecKVE  = 28
	rrecW    = 45 // RW: the record's width, bytes
)

// decodeRosterRec decodes the record at the start of b (len(b) >= rrecW).
func decodeRosterRec(b string) rosterRec {
	u32 := func(o int) uint32 { return binary.BigEndian.Uint32([]byte(b[o : o+4])) }
	f64 := func(o int) float64 { return math.Float64frombits(binary.BigEndian.Uint64([]byte(b[o : o+8]))) }
	return rosterRec{slot: u32(0), rid: u32(rrecRID), rank: u32(rrecRank), mnbt: f64(rrecMNBT), tkv: f64(rrecTKV), kve: int8(b[rrecKVE])}
}

// Positions in workers.lua's 'ok' reply (see its header).
const (
	wpNext = iota + 1
	wpRecs
	wpLoads
	wpURLs
	wpSeen
	wpFails
	wpUnhealthy
	wpFence
	wpHeld
	wpTTFT
	wpIDs
	wpDead
	wpLen
)

// decodeWorkersPage decodes workers.lua's 'ok' reply into the page's workers and their health records
// (the pool's config turns them into Live, KVEventsEffective and Health). Numbers convert as Redis
// converted the old reply's Lua numbers: truncated toward zero.
func decodeWorkersPage(arr []rueidis.RedisMessage) ([]WorkerInfo, []healthRec, error) {
	if len(arr) != wpLen {
		return nil, nil, fmt.Errorf("workers reply of %d elements, want %d", len(arr), wpLen)
	}
	recs, loads := msgStr(arr[wpRecs]), msgStr(arr[wpLoads])
	col := func(k int) []rueidis.RedisMessage { v, _ := arr[k].ToArray(); return v }
	// at returns c[i] as a string, "" when c is empty (its hash does not exist) or the field is absent
	at := func(c []rueidis.RedisMessage, i int) string {
		if len(c) == 0 {
			return ""
		}
		return msgStr(c[i])
	}
	urls, seen, fails, unh := col(wpURLs), col(wpSeen), col(wpFails), col(wpUnhealthy)
	fence, held, ttft, ids := col(wpFence), col(wpHeld), col(wpTTFT), col(wpIDs)
	n := len(recs) / rrecW
	nw := len(ids)
	// a column of a hash that does not exist comes back empty (workers.lua's hmget_all): every field absent
	absent := func(c []rueidis.RedisMessage, want int) bool { return len(c) != want && len(c) != 0 }
	if len(recs) != n*rrecW || len(loads) != 24*n || absent(fence, 3*n) || absent(held, n) || absent(ttft, n) ||
		len(urls) != nw || len(ids) != nw || absent(seen, nw) || absent(fails, nw) || absent(unh, nw) {
		return nil, nil, fmt.Errorf("workers reply: %d record bytes, %d load bytes, %d/%d/%d rank fields, %d/%d/%d/%d/%d worker fields",
			len(recs), len(loads), len(fence), len(held), len(ttft), nw, len(urls), len(seen), len(fails), len(unh))
	}
	out := make([]WorkerInfo, 0, nw)
	healths := make([]healthRec, 0, nw)
	load := func(i, k int) int64 {
		o := 24*i + 8*k
		return int64(math.Float64frombits(binary.BigEndian.Uint64([]byte(loads[o : o+8]))))
	}
	for i := 0; i < n; i++ {
		rec := decodeRosterRec(recs[i*rrecW:])
		if rec.rank == 0 {
			k := len(out)
			if k == nw {
				return nil, nil, fmt.Errorf("workers reply: more workers in the records than ids (%d)", nw)
			}
			info := WorkerInfo{LastSeenMs: luaInt(at(seen, k))}
			info.WorkerID, info.URL = msgStr(ids[k]), msgStr(urls[k])
			info.TotalKVBlocks, info.MaxNumBatchedTokens = int64(rec.tkv), int64(rec.mnbt)
			switch rec.kve {
			case 0:
				f := false
				info.KVEvents = &f
			case 1:
				t := true
				info.KVEvents = &t
			}
			h := healthRec{fails: luaInt(at(fails, k))}
			if u := at(unh, k); len(u) == 24 {
				f := func(o int) int64 { return int64(math.Float64frombits(binary.BigEndian.Uint64([]byte(u[o : o+8])))) }
				h.until, h.probe, h.backoff = f(0), f(8), f(16)
			}
			out = append(out, info)
			healths = append(healths, h)
		} else if len(out) == 0 || int(rec.rank) != len(out[len(out)-1].Ranks) {
			return nil, nil, fmt.Errorf("workers reply: record %d is rank %d out of order", i, rec.rank)
		}
		w := &out[len(out)-1]
		last, _ := strconv.ParseUint(at(fence, 3*i+1), 10, 64)
		ri := RankInfo{DPRank: int(rec.rank), ActivePrefillTokens: load(i, 0), ActiveDecodeBlocks: load(i, 1),
			ActiveRequests: load(i, 2), CachedBlocks: luaInt(at(held, i)), LastEventID: last,
			Epoch: at(fence, 3*i), Degraded: at(fence, 3*i+2) == "1"}
		if st, ok := unpackTTFT(at(ttft, i)); ok {
			ri.TTFT = ttftShown(st)
		}
		w.Ranks = append(w.Ranks, ri)
		w.DPSize = len(w.Ranks)
	}
	if len(out) != nw {
		return nil, nil, fmt.Errorf("workers reply: %d workers in the records, %d ids", len(out), nw)
	}
	return out, healths, nil
}

// luaInt reads a decimal number stored by a script (a counter, ms) as Lua's tonumber then Redis's reply
// conversion did: truncated toward zero; "" (absent) is 0.
func luaInt(s string) int64 {
	if s == "" {
		return 0
	}
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v
	}
	f, _ := strconv.ParseFloat(s, 64)
	return int64(f)
}
