package vllmwire

import (
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
)

// SGLang payloads, written by hand to match what SGLang's publisher puts on the wire
// (python/sglang/srt/disaggregation/kv_events.py: ZmqEventPublisher, msgspec.msgpack.Encoder, the same
// struct options as vLLM — array_like=True, omit_defaults=True, tag=True). Checked against
//   - sgl-project/sglang 006d053f182f9b488d2bd841afa06d5f9120a258: EventBatch [ts, events] (no rank);
//     BlockStored [block_hashes, parent_block_hash, token_ids, block_size, lora_id]; BlockRemoved
//     [block_hashes]; no medium;
//   - sgl-project/sglang 612d579090db24ec7c47cc5ca6b83e0c649b8c28: EventBatch gains
//     attn_dp_rank: Optional[int] = None as its third field, filled with the publisher's rank by
//     publish() (so always written);
//   - PR #18205 (merged 2026-02) and PR #22894 (merged 2026-04): BlockStored and BlockRemoved gain a
//     trailing medium: Optional[str] = None — "GPU", "CPU_TIER1"/"CPU_TIER2" at first, then the
//     StorageMedium values "GPU", "CPU_PINNED", "DISK", "EXTERNAL". With a default, a None medium is
//     omitted (the array is one shorter), unlike vLLM where medium has no default and is written nil;
//   - later SGLang (the version with /server_info endpoint discovery): the structs drop
//     omit_defaults (a None medium is written nil again), and a salted request's block is sent as
//     BlockStoredWithMetadata — BlockStored's slots plus a kw_only metadata struct, a msgpack map
//     {"cache_salt": str} in slot 7, where vLLM has lora_name. Decoded as no LoRA name; the salt is
//     not part of kvrouter's block identity (docs/API.md "kvrouter ingest").
//
// The framing is vLLM's exactly: [topic, seq u64 BE, payload], topic "" by default, the same ROUTER
// replay protocol and END_SEQ, and the same dp-rank port offset (offset_endpoint_port: tcp port + rank,
// for the PUB and the replay endpoint alike). Block hashes are Python ints (signed 64-bit when they
// come from hash()), block_size is SGLang's page size.
var sglangFixtures = map[string]string{
	// SGLang before attn_dp_rank and medium: a 2-slot batch, a 6-slot BlockStored, a 2-slot
	// BlockRemoved.
	"sglang_006d053": `
92                              | EventBatch: fixarray(2) [ts, events]
cb 41 d9 54 fc 40 b0 00 00      | ts: float64 1700000002.75
93                              | events: fixarray(3)
96                              | BlockStored: tag + 5 fields
ab "BlockStored"                | tag
92                              | block_hashes: fixarray(2)
d3 c0 00 00 00 00 00 00 01      |   -4611686018427387903 (int64)
d0 85                           |   -123 (int8)
c0                              | parent_block_hash: None
98                              | token_ids: fixarray(8)
01 02 03 04                     |   1 2 3 4
cd 01 2c cc c8 05 06            |   300 200 5 6
04                              | block_size: 4 (page size)
c0                              | lora_id: None
92                              | BlockRemoved: tag + 1 field
ac "BlockRemoved"               | tag
91 d0 85                        | block_hashes: [-123]
91                              | AllBlocksCleared: tag only
b0 "AllBlocksCleared"           | tag
`,
	// SGLang with attn_dp_rank and medium (HiCache tiers): a stored chain on the host tier, a removal
	// from the device, and a stored block whose medium is None (omitted: 6 slots).
	"sglang_medium_dp": `
93                              | EventBatch: fixarray(3) [ts, events, attn_dp_rank]
cb 41 d9 54 fc 40 e0 00 00      | ts: float64 1700000003.5
93                              | events: fixarray(3)
97                              | BlockStored: tag + 6 fields
ab "BlockStored"                | tag
91 d3 c0 00 00 00 00 00 00 01   | block_hashes: [-4611686018427387903]
d3 90 00 00 00 00 00 00 00      | parent_block_hash: -8070450532247928832
94 0a 0b 0c 0d                  | token_ids: 10 11 12 13
04                              | block_size: 4
c0                              | lora_id: None
aa "CPU_PINNED"                 | medium: StorageMedium.CPU
93                              | BlockRemoved: tag + 2 fields
ac "BlockRemoved"               | tag
91 d0 85                        | block_hashes: [-123]
a3 "GPU"                        | medium: StorageMedium.GPU
96                              | BlockStored: tag + 5 fields (medium=None omitted)
ab "BlockStored"                | tag
91 07                           | block_hashes: [7]
c0                              | parent_block_hash: None
94 01 02 03 04                  | token_ids
04                              | block_size
01                              | lora_id: 1
01                              | attn_dp_rank: 1
`,
	// The remote-pool tier and the early tier names, one block each.
	"sglang_tiers": `
93                              | EventBatch: [ts, events, attn_dp_rank]
cb 41 d9 54 fc 40 e0 00 00      | ts
93                              | events: fixarray(3)
97 ab "BlockStored" 91 01 c0 94 01 02 03 04 04 c0 a8 "EXTERNAL"  | medium: StorageMedium.EXTERNAL
97 ab "BlockStored" 91 02 01 94 05 06 07 08 04 c0 a9 "CPU_TIER1" | medium: PR #18205's L2 name
93 ac "BlockRemoved" 91 01 a9 "CPU_TIER2"                        | medium: PR #18205's L3 name
00                              | attn_dp_rank: 0
`,
	// Later SGLang: no omit_defaults, so medium=None is written nil; a salted block carries the metadata
	// map in slot 7.
	"sglang_metadata": `
93                              | EventBatch: [ts, events, attn_dp_rank]
cb 41 d9 54 fc 40 e0 00 00      | ts
92                              | events: fixarray(2)
97                              | BlockStored: tag + 6 fields
ab "BlockStored" 91 01 c0 94 01 02 03 04 04 c0
c0                              | medium: None, written (no omit_defaults)
98                              | BlockStoredWithMetadata: tag + 6 fields + metadata
ab "BlockStored" 91 02 01 94 05 06 07 08 04 c0
a3 "GPU"                        | medium
81 aa "cache_salt" a6 "tenant" | metadata: BlockStoredMetadata{cache_salt: "tenant"} (a map)
00                              | attn_dp_rank: 0
`,
	// Events as tagged maps inside the positional batch, with SGLang's extra optional keys: the layout a
	// KVCacheEvent docstring of a later SGLang describes ("tagged msgpack maps … EventBatch stays a
	// positional array [ts, events, attn_dp_rank]"), seen quoted in a third-party analysis, not in an
	// SGLang commit read here. Unknown keys (cache_salt, session_id) are skipped.
	"sglang_map_events": `
93                              | EventBatch: [ts, events, attn_dp_rank]
cb 41 d9 54 fc 40 e0 00 00      | ts
92                              | events: fixarray(2)
88                              | BlockStored: fixmap(8), lora_id=None omitted
a4 "type" ab "BlockStored"
ac "block_hashes" 91 d0 85
b1 "parent_block_hash" c0
a9 "token_ids" 94 01 02 03 04
aa "block_size" 04
a6 "medium" a3 "GPU"
aa "cache_salt" a1 "x"
aa "session_id" a1 "s"
83 a4 "type" ac "BlockRemoved" ac "block_hashes" 91 d0 85 a6 "medium" a3 "GPU"
03                              | attn_dp_rank: 3
`,
	// A map-form batch keyed by SGLang's field name (SGLang itself only sends arrays; accepted so the
	// rank is not lost if a relay re-encodes its structs as maps).
	"sglang_map_attn_dp_rank": `
83                              | EventBatch: fixmap(3)
a2 "ts" cb 41 d9 54 fc 40 e0 00 00
a6 "events" 91
82 a4 "type" b0 "AllBlocksCleared" a6 "medium" a3 "GPU"
ac "attn_dp_rank" 02
`,
}

// sglangEquivalents are the same batches as vLLM would publish them, built with this package's
// encoder (vLLM's form: data_parallel_rank, medium written nil when None).
var sglangEquivalents = map[string]Batch{
	"sglang_006d053": {TS: 1700000002.75, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{0xc000000000000001, 0xffffffffffffff85},
			TokenIDs: []uint32{1, 2, 3, 4, 300, 200, 5, 6}, BlockSize: 4},
		{Kind: KindRemoved, BlockHashes: []uint64{0xffffffffffffff85}},
		{Kind: KindCleared},
	}},
	"sglang_medium_dp": {TS: 1700000003.5, DPRank: 1, HasDPRank: true, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{0xc000000000000001}, Parent: 0x9000000000000000, HasParent: true,
			TokenIDs: []uint32{10, 11, 12, 13}, BlockSize: 4, Medium: "CPU_PINNED"},
		{Kind: KindRemoved, BlockHashes: []uint64{0xffffffffffffff85}, Medium: "GPU"},
		{Kind: KindStored, BlockHashes: []uint64{7}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, LoRAID: 1, HasLoRAID: true},
	}},
	"sglang_tiers": {TS: 1700000003.5, HasDPRank: true, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "EXTERNAL"},
		{Kind: KindStored, BlockHashes: []uint64{2}, Parent: 1, HasParent: true, TokenIDs: []uint32{5, 6, 7, 8}, BlockSize: 4, Medium: "CPU_TIER1"},
		{Kind: KindRemoved, BlockHashes: []uint64{1}, Medium: "CPU_TIER2"},
	}},
	"sglang_metadata": {TS: 1700000003.5, HasDPRank: true, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{1}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4},
		{Kind: KindStored, BlockHashes: []uint64{2}, Parent: 1, HasParent: true, TokenIDs: []uint32{5, 6, 7, 8}, BlockSize: 4, Medium: "GPU"},
	}},
	"sglang_map_events": {TS: 1700000003.5, DPRank: 3, HasDPRank: true, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{0xffffffffffffff85}, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 4, Medium: "GPU"},
		{Kind: KindRemoved, BlockHashes: []uint64{0xffffffffffffff85}, Medium: "GPU"},
	}},
	"sglang_map_attn_dp_rank": {TS: 1700000003.5, DPRank: 2, HasDPRank: true, Events: []Event{{Kind: KindCleared}}},
}

// parseDump turns a fixture dump (the testdata/README.md notation) into bytes.
func parseDump(t *testing.T, dump string) []byte {
	t.Helper()
	var out []byte
	for _, line := range strings.Split(dump, "\n") {
		left, _, _ := strings.Cut(line, "|")
		for _, tok := range strings.Fields(left) {
			if strings.HasPrefix(tok, `"`) {
				out = append(out, strings.Trim(tok, `"`)...)
				continue
			}
			b, err := hex.DecodeString(tok)
			if err != nil || len(b) != 1 {
				t.Fatalf("bad byte token %q", tok)
			}
			out = append(out, b[0])
		}
	}
	return out
}

// TestSGLangDecodesLikeVLLM: every SGLang payload decodes to exactly the batch its vLLM equivalent
// decodes to.
func TestSGLangDecodesLikeVLLM(t *testing.T) {
	for name, dump := range sglangFixtures {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(parseDump(t, dump))
			if err != nil {
				t.Fatal(err)
			}
			want := sglangEquivalents[name]
			for _, form := range []Form{FormArray, FormMap} {
				vllm, err := Encode(want, EncodeOptions{Form: form})
				if err != nil {
					t.Fatal(err)
				}
				fromVLLM, err := Decode(vllm)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, fromVLLM) {
					t.Fatalf("form %d:\nsglang %+v\nvllm   %+v", form, got, fromVLLM)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded %+v\nwant    %+v", got, want)
			}
		})
	}
}
