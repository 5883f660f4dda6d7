package ingest

import (
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/statestore"
	"github.com/zeebo/xxh3"
)

// Multimodal extra_keys fold into local hashes (SPEC §3): pairs always, bare strings only when they
// are canonical 64-hex identifiers; the LoRA name and cache_salt never.
func TestNormalizeMultimodalExtraKeys(t *testing.T) {
	b := decodeFixture(t, "array_stored_mm_extra_keys.msgpack")
	evs, st := Normalize(nil, b, NormalizeParams{PoolBlockSize: 2})
	if st != (NormalizeStats{Stored: 1}) || len(evs) != 1 {
		t.Fatalf("stats %+v, %d events", st, len(evs))
	}
	const (
		idA = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb" // sha256("a")
		idB = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d" // sha256("b")
	)
	hA, hB := uint64(0xca978112ca1bbdca), uint64(0x3e23e8160039594a) // first 8 bytes, big-endian
	if blockhash.MMIdentifierHash(idA) != hA || blockhash.MMIdentifierHash(idB) != hB {
		t.Fatal("identifier rule")
	}
	seed := blockhash.LoRASeed("sql-lora")
	want := []statestore.StoredBlock{
		{EngineHash: 1, LocalHash: blockhash.LocalMultimodal([]uint32{5, 6}, []uint64{hA}, seed)},
		{EngineHash: 2, LocalHash: blockhash.LocalMultimodal([]uint32{7, 8}, []uint64{hA, xxh3.HashString("img-b")}, seed)},
		{EngineHash: 3, LocalHash: blockhash.LocalMultimodal([]uint32{9, 10}, []uint64{hB}, seed)},
	}
	for i, w := range want {
		if evs[0].Blocks[i] != w {
			t.Errorf("block %d: got %+v, want %+v", i, evs[0].Blocks[i], w)
		}
	}
	// The router computes the same hashes from the prompt's items (gateway side).
	items := []blockhash.MMItem{{Hash: hA, Offset: 1, Length: 2}, {Hash: xxh3.HashString("img-b"), Offset: 3, Length: 1}, {Hash: hB, Offset: 4, Length: 2}}
	local := blockhash.LocalHashesMM(nil, []uint32{5, 6, 7, 8, 9, 10}, 2, seed, items)
	for i := range want {
		if local[i] != want[i].LocalHash {
			t.Errorf("router block %d: %d, ingest %d", i, local[i], want[i].LocalHash)
		}
	}
}

func TestNormalizeExtraKeysEdgeCases(t *testing.T) {
	canon := "4c4b6a3be1314ab86138bef4314dde022e600960d8689a2c8f8631802d20dab6"
	stored := func(keys [][]vllmwire.ExtraKey, lora string) vllmwire.Batch {
		return vllmwire.Batch{Events: []vllmwire.Event{{Kind: vllmwire.KindStored, BlockHashes: []uint64{7, 8},
			TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, LoRAName: lora, ExtraKeys: keys}}}
	}
	plain := func(lora string) []uint64 {
		s := blockhash.LoRASeed(lora)
		return []uint64{blockhash.Local([]uint32{1, 2}, s), blockhash.Local([]uint32{3, 4}, s)}
	}
	check := func(name string, b vllmwire.Batch, want []uint64) {
		t.Helper()
		evs, st := Normalize(nil, b, NormalizeParams{})
		if st.Stored != 1 {
			t.Fatalf("%s: stats %+v", name, st)
		}
		for i, w := range want {
			if got := evs[0].Blocks[i].LocalHash; got != w {
				t.Errorf("%s: block %d = %d, want %d", name, i, got, w)
			}
		}
	}
	// No keys, an empty list of entries, None entries, non-canonical bare strings (cache_salt, a LoRA
	// name, an old-style client uuid): exactly the text-only hashes.
	check("nil", stored(nil, ""), plain(""))
	check("none entries", stored([][]vllmwire.ExtraKey{nil, nil}, ""), plain(""))
	check("salt and lora", stored([][]vllmwire.ExtraKey{{{Identifier: "lora-x"}, {Identifier: "salt"}}, nil}, "lora-x"), plain("lora-x"))
	// A canonical LoRA name is the LoRA, not an item.
	check("canonical lora", stored([][]vllmwire.ExtraKey{{{Identifier: canon}}, {{Identifier: canon}}}, canon), plain(canon))
	// A canonical bare identifier is an item.
	mm := []uint64{blockhash.MMIdentifierHash(canon)}
	check("bare canonical", stored([][]vllmwire.ExtraKey{nil, {{Identifier: canon}}}, ""),
		[]uint64{plain("")[0], blockhash.LocalMultimodal([]uint32{3, 4}, mm, blockhash.Seed)})
	// extra_keys not one entry per block: dropped as unhashable.
	_, st := Normalize(nil, stored([][]vllmwire.ExtraKey{nil}, ""), NormalizeParams{})
	if st.Unhashable != 1 || st.Stored != 0 {
		t.Errorf("mismatched extra_keys: %+v", st)
	}
}
