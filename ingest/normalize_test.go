package ingest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/statestore"
)

func decodeFixture(t *testing.T, name string) vllmwire.Batch {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("vllmwire", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	b, err := vllmwire.Decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTierOf(t *testing.T) {
	for medium, want := range map[string]statestore.Tier{
		"": statestore.TierDevice, "GPU": statestore.TierDevice, "device": statestore.TierDevice,
		"CPU": statestore.TierHost, "CPU_PINNED": statestore.TierHost, "cpu_tier1": statestore.TierHost,
		"DISK": statestore.TierDisk, "NVME": statestore.TierDisk, "CPU_TIER2": statestore.TierDisk,
		"EXTERNAL": statestore.TierDisk, // SGLang HiCache's shared/remote pool
	} {
		got, known := TierOf(medium)
		if got != want || !known {
			t.Errorf("TierOf(%q) = %v, %v; want %v, true", medium, got, known, want)
		}
	}
	if got, known := TierOf("HBM3"); got != statestore.TierDevice || known {
		t.Errorf("unknown medium: %v, %v", got, known)
	}
}

func TestNormalizeStoredUint(t *testing.T) {
	b := decodeFixture(t, "array_stored_uint.msgpack")
	evs, st := Normalize(nil, b, NormalizeParams{DPRank: 5, Epoch: "e1", FirstEventID: 10, PoolBlockSize: 4})
	if st != (NormalizeStats{Stored: 1}) || len(evs) != 1 {
		t.Fatalf("stats %+v, %d events", st, len(evs))
	}
	ev := evs[0]
	toks := b.Events[0].TokenIDs
	want := statestore.Event{
		DPRank: 0, EventID: 10, HasEventID: true, Epoch: "e1", // the batch's rank wins over the default
		Kind: statestore.EventStored, Tier: statestore.TierDevice, BlockSize: 4,
		Blocks: []statestore.StoredBlock{
			{EngineHash: 1, LocalHash: 14643705804678351452}, // SPEC §3 vector: local([1,2,3,4])
			{EngineHash: 200, LocalHash: blockhash.Local(toks[4:8], blockhash.Seed)},
			{EngineHash: 70000, LocalHash: blockhash.Local(toks[8:12], blockhash.Seed)},
			{EngineHash: 0xdeadbeefcafef00d, LocalHash: 16777012769546811212}, // local([5,6,7,8])
		},
	}
	if !reflect.DeepEqual(ev, want) {
		t.Fatalf("got  %+v\nwant %+v", ev, want)
	}
}

func TestNormalizeLoRAAndTier(t *testing.T) {
	b := decodeFixture(t, "array_stored_int64_no_dp.msgpack")
	evs, _ := Normalize(nil, b, NormalizeParams{DPRank: 3, FirstEventID: 1, PoolBlockSize: 2})
	ev := evs[0]
	if ev.DPRank != 3 || ev.Tier != statestore.TierHost || !ev.HasParent || ev.Parent != 9446744073709551616 {
		t.Fatalf("event %+v", ev)
	}
	seed := blockhash.LoRASeed("sql-lora")
	for i, blk := range ev.Blocks {
		if want := blockhash.Local([]uint32{uint32(10 + 2*i), uint32(11 + 2*i)}, seed); blk.LocalHash != want {
			t.Errorf("block %d local %d, want %d (LoRA seed)", i, blk.LocalHash, want)
		}
	}
}

func TestNormalizeEAGLE(t *testing.T) {
	b := decodeFixture(t, "array_eagle.msgpack")
	evs, st := Normalize(nil, b, NormalizeParams{PoolBlockSize: 2})
	if st.Stored != 1 || len(evs[0].Blocks) != 2 {
		t.Fatalf("stats %+v events %+v", st, evs)
	}
	if evs[0].HasEventID {
		t.Fatal("FirstEventID 0 must leave events without ids")
	}
	if got, want := evs[0].Blocks[1].LocalHash, blockhash.Local([]uint32{102, 103}, blockhash.Seed); got != want {
		t.Fatalf("EAGLE block 1 local %d, want %d", got, want)
	}
}

func TestNormalizeRemovedClearedUnknown(t *testing.T) {
	b := decodeFixture(t, "array_trailing_unknown.msgpack")
	evs, st := Normalize(nil, b, NormalizeParams{FirstEventID: 7, Epoch: "x"})
	if st != (NormalizeStats{Removed: 1, Cleared: 1, Unknown: 1}) {
		t.Fatalf("stats %+v", st)
	}
	want := []statestore.Event{
		{EventID: 7, HasEventID: true, Epoch: "x", Kind: statestore.EventRemoved, Removed: []uint64{9}},
		{EventID: 8, HasEventID: true, Epoch: "x", Kind: statestore.EventCleared}, // unknown event used no id
	}
	if !reflect.DeepEqual(evs, want) {
		t.Fatalf("got  %+v\nwant %+v", evs, want)
	}
	b = decodeFixture(t, "array_removed_cleared.msgpack")
	evs, _ = Normalize(evs[:0], b, NormalizeParams{})
	if evs[0].Tier != statestore.TierHost || evs[1].Tier != statestore.TierDevice || evs[3].Kind != statestore.EventCleared {
		t.Fatalf("events %+v", evs)
	}
}

func TestNormalizeDrops(t *testing.T) {
	b := vllmwire.Batch{Events: []vllmwire.Event{
		{Kind: vllmwire.KindStored, BlockHashes: []uint64{1, 2}, TokenIDs: []uint32{1, 2, 3}, BlockSize: 2}, // 1 block of tokens, 2 hashes
		{Kind: vllmwire.KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2}, // 2 blocks, 1 hash
		{Kind: vllmwire.KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2}},                     // no size anywhere
		{Kind: vllmwire.KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2}, BlockSize: 2, HasLoRAID: true, LoRAID: 3, Medium: "HBM"},
		{Kind: vllmwire.KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3}, BlockSize: 2}, // partial tail ignored
	}}
	evs, st := Normalize(nil, b, NormalizeParams{FirstEventID: 1, PoolBlockSize: 0})
	if st != (NormalizeStats{Stored: 2, Unhashable: 3, LoRAIDOnly: 1, UnknownMedium: 1}) {
		t.Fatalf("stats %+v", st)
	}
	_, st = Normalize(nil, vllmwire.Batch{Events: b.Events[2:3]}, NormalizeParams{PoolBlockSize: 2})
	if st.Stored != 1 {
		t.Fatalf("pool block size fallback: %+v", st)
	}
	if evs[0].EventID != 1 || evs[1].EventID != 2 || evs[0].BlockSize != 2 {
		t.Fatalf("ids/sizes %+v", evs)
	}
	if evs[0].Blocks[0].LocalHash != blockhash.Local([]uint32{1, 2}, blockhash.LoRASeed("lora_id:3")) {
		t.Fatal("lora_id without a name must hash under its synthetic name")
	}
}
