package vllmwire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// TestFixturesAreValidMsgpack decodes every fixture with an independent msgpack library, so a wrong
// hand-written length byte is caught even where this package's decoder would agree with it.
func TestFixturesAreValidMsgpack(t *testing.T) {
	for name, b := range readmeFixtures(t) {
		dec := msgpack.NewDecoder(bytes.NewReader(b))
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if _, err := dec.DecodeInterface(); err == nil {
			t.Errorf("%s: trailing value after the batch", name)
		}
	}
}

func TestDecodeFixtures(t *testing.T) {
	tokensUint := []uint32{1, 2, 3, 4, 128, 255, 256, 65535, 65536, 100000, 151643, 4294967295, 5, 6, 7, 8}
	cases := []struct {
		file string
		want Batch
	}{
		{"array_stored_uint.msgpack", Batch{TS: 1700000000.5, DPRank: 0, HasDPRank: true, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{1, 200, 70000, 0xdeadbeefcafef00d},
			TokenIDs:    tokensUint,
			BlockSize:   4,
			Medium:      "GPU",
		}}}},
		{"array_stored_int64_no_dp.msgpack", Batch{TS: 1700000001.25, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{17212176183586094827, 18446744073709551574, 18446744073709551611},
			Parent:      9446744073709551616, HasParent: true,
			TokenIDs:  []uint32{10, 11, 12, 13, 14, 15},
			BlockSize: 2,
			LoRAID:    7, HasLoRAID: true,
			Medium:   "CPU",
			LoRAName: "sql-lora",
		}}}},
		{"array_stored_bytes_extra.msgpack", Batch{TS: 1700000002.0, DPRank: 2, HasDPRank: true, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{6325407235404923024, 4814299736571553012, 66051},
			Parent:      807367540921925388, HasParent: true,
			TokenIDs:  []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
			BlockSize: 4,
			Medium:    "GPU",
			// Block 1's tuple is a bare string and an int: the string is kept, the int dropped.
			ExtraKeys: [][]ExtraKey{nil, {{Identifier: "mm-img-0"}}, nil},
		}}}},
		{"array_removed_cleared.msgpack", Batch{TS: 1700000003.75, Events: []Event{
			{Kind: KindRemoved, BlockHashes: []uint64{1, 200}, Medium: "CPU_TIER1"},
			{Kind: KindRemoved, BlockHashes: []uint64{3}},
			{Kind: KindRemoved, BlockHashes: []uint64{4}},
			{Kind: KindCleared},
		}}},
		{"array_eagle.msgpack", Batch{TS: 1700000004.5, DPRank: 1, HasDPRank: true, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{11, 12},
			Parent:      10, HasParent: true,
			TokenIDs:  []uint32{100, 101, 102, 103, 104},
			BlockSize: 2,
		}}}},
		{"array_trailing_unknown.msgpack", Batch{TS: 1700000005.0, DPRank: 0, HasDPRank: true, Events: []Event{
			{Kind: KindRemoved, BlockHashes: []uint64{9}, Medium: "GPU"},
			{Kind: KindUnknown, Type: "BlockUpdated"},
			{Kind: KindCleared},
		}}},
		{"map_batch.msgpack", Batch{TS: 1700000005.0, DPRank: 3, HasDPRank: true, Events: []Event{
			{
				Kind:        KindStored,
				BlockHashes: []uint64{21, 22},
				Parent:      20, HasParent: true,
				TokenIDs:  []uint32{1, 2, 3, 4},
				BlockSize: 2,
				Medium:    "DISK",
				LoRAName:  "adapter-x",
			},
			{Kind: KindRemoved, BlockHashes: []uint64{21}, Medium: "DISK"},
			{Kind: KindCleared},
		}}},
		{"array_stored_mm_extra_keys.msgpack", Batch{TS: 1700000007.0, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{1, 2, 3},
			TokenIDs:    []uint32{5, 6, 7, 8, 9, 10},
			BlockSize:   2,
			Medium:      "GPU",
			LoRAName:    "sql-lora",
			ExtraKeys: [][]ExtraKey{
				{{Identifier: "sql-lora"}, {Identifier: sha256A, Pair: true, Offset: 1}, {Identifier: "salt-1"}},
				{{Identifier: "sql-lora"}, {Identifier: sha256A, Pair: true, Offset: -1}, {Identifier: "img-b", Pair: true, Offset: 1}},
				{{Identifier: sha256B}},
			},
		}}}},
		{"map_no_dp_unknown_keys.msgpack", Batch{TS: 1700000006.125, Events: []Event{{
			Kind:        KindStored,
			BlockHashes: []uint64{4814299736571553012},
			TokenIDs:    []uint32{7, 8},
			BlockSize:   2,
			ExtraKeys:   [][]ExtraKey{nil},
		}}}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			got, err := Decode(fixture(t, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("decoded\n got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestEncodeMatchesFixtures: for the fixtures that are exactly what vLLM's array form emits for a
// batch this package can represent, Encode must reproduce them byte for byte.
func TestEncodeMatchesFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		opts EncodeOptions
	}{
		{"array_stored_uint.msgpack", EncodeOptions{Form: FormArray, Hashes: HashUint}},
		{"array_stored_int64_no_dp.msgpack", EncodeOptions{Form: FormArray, Hashes: HashInt}},
	} {
		raw := fixture(t, tc.file)
		b, err := Decode(raw)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Encode(b, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, raw) {
			t.Errorf("%s: re-encoded\n got %x\nwant %x", tc.file, got, raw)
		}
	}
}

// TestEncodeMapForm checks the map form against a payload built with an independent msgpack encoder
// in vLLM's declaration order.
func TestEncodeMapForm(t *testing.T) {
	b := Batch{TS: 1.5, DPRank: 1, HasDPRank: true, Events: []Event{
		{Kind: KindStored, BlockHashes: []uint64{7}, TokenIDs: []uint32{1, 2}, BlockSize: 2, Medium: "GPU"},
		{Kind: KindRemoved, BlockHashes: []uint64{7}},
		{Kind: KindCleared},
	}}
	got, err := Encode(b, EncodeOptions{Form: FormMap})
	if err != nil {
		t.Fatal(err)
	}
	var want bytes.Buffer
	enc := msgpack.NewEncoder(&want)
	enc.UseCompactInts(true) // msgspec writes the smallest integer form
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.EncodeMapLen(3))
	must(enc.EncodeString("ts"))
	must(enc.EncodeFloat64(1.5))
	must(enc.EncodeString("events"))
	must(enc.EncodeArrayLen(3))
	must(enc.EncodeMapLen(8))
	for _, kv := range []any{"type", "BlockStored", "block_hashes", []uint64{7}, "parent_block_hash", nil,
		"token_ids", []uint64{1, 2}, "block_size", 2, "lora_id", nil, "medium", "GPU", "lora_name", nil} {
		must(enc.Encode(kv))
	}
	must(enc.EncodeMapLen(3))
	for _, kv := range []any{"type", "BlockRemoved", "block_hashes", []uint64{7}, "medium", nil} {
		must(enc.Encode(kv))
	}
	must(enc.EncodeMapLen(1))
	must(enc.Encode("type"))
	must(enc.Encode("AllBlocksCleared"))
	must(enc.EncodeString("data_parallel_rank"))
	must(enc.EncodeInt(1))
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("map form\n got %x\nwant %x", got, want.Bytes())
	}
	back, err := Decode(got)
	if err != nil || !reflect.DeepEqual(back, b) {
		t.Fatalf("round trip: %v\n got %+v\nwant %+v", err, back, b)
	}
}

func TestDecodeErrors(t *testing.T) {
	stored := func(tail ...byte) []byte {
		// [0.0, [["BlockStored", [1], nil, <tail…>]]]
		b := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x98, 0xab}
		b = append(b, "BlockStored"...)
		b = append(b, 0x91, 0x01, 0xc0)
		return append(b, tail...)
	}
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"not a container", []byte{0x01}, ErrMalformed},
		{"one slot", []byte{0x91, 0x00}, ErrMalformed},
		{"truncated float", []byte{0x92, 0xcb, 0x00}, ErrMalformed},
		{"events not array", []byte{0x92, 0x00, 0x01}, ErrMalformed},
		{"array len beyond input", []byte{0x92, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff}, ErrMalformed},
		{"too many events", append([]byte{0x92, 0x00, 0xdd, 0x00, 0x10, 0x00, 0x01}, make([]byte, MaxEvents+1)...), ErrLimit},
		{"trailing bytes", []byte{0x92, 0x00, 0x90, 0x00}, ErrMalformed},
		{"event without tag", []byte{0x92, 0x00, 0x91, 0x90}, ErrMalformed},
		{"tag not string", []byte{0x92, 0x00, 0x91, 0x91, 0x01}, ErrMalformed},
		{"stored too short", append([]byte{0x92, 0x00, 0x91, 0x92, 0xab}, append([]byte("BlockStored"), 0x90)...), ErrMalformed},
		{"token above u32", stored(0x91, 0xcf, 0, 0, 0, 1, 0, 0, 0, 0, 0x01, 0xc0, 0xc0, 0xc0), ErrLimit},
		{"negative token", stored(0x91, 0xff, 0x01, 0xc0, 0xc0, 0xc0), ErrLimit},
		{"negative block size", stored(0x91, 0x01, 0xff, 0xc0, 0xc0, 0xc0), ErrLimit},
		{"huge block size", stored(0x91, 0x01, 0xce, 0, 0x10, 0, 0, 0xc0, 0xc0, 0xc0), ErrLimit},
		{"bad pair", stored(0x91, 0x93, 1, 2, 3, 0x01, 0xc0, 0xc0, 0xc0), ErrMalformed},
		{"mixed pairs", stored(0x92, 0x92, 1, 2, 3, 0x01, 0xc0, 0xc0, 0xc0), ErrMalformed},
		{"empty hash bytes", []byte{0x92, 0x00, 0x91, 0x92, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xc4, 0x00}, ErrMalformed},
		{"hash is float", []byte{0x92, 0x00, 0x91, 0x92, 0xac, 'B', 'l', 'o', 'c', 'k', 'R', 'e', 'm', 'o', 'v', 'e', 'd', 0x91, 0xca, 0, 0, 0, 0}, ErrMalformed},
		{"negative dp rank", []byte{0x93, 0x00, 0x90, 0xff}, ErrLimit},
		{"map without events", []byte{0x81, 0xa2, 't', 's', 0x00}, ErrMalformed},
		{"event map without type", []byte{0x92, 0x00, 0x91, 0x80}, ErrMalformed},
		{"stored map missing fields", []byte{0x92, 0x00, 0x91, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xab, 'B', 'l', 'o', 'c', 'k', 'S', 't', 'o', 'r', 'e', 'd'}, ErrMalformed},
		{"deep nesting in ignored slot", append(append([]byte{0x93, 0x00, 0x90, 0x00, 0x91}, bytes.Repeat([]byte{0x91}, 100)...), 0x00), ErrMalformed},
		{"reserved type byte", []byte{0x93, 0x00, 0x90, 0x00, 0xc1}, ErrMalformed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := Decode(tc.in)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if b.Events != nil {
				t.Fatalf("batch not empty on error: %+v", b)
			}
		})
	}
}

// Hex SHA-256 of "a" and "b": the multimodal identifiers of array_stored_mm_extra_keys.msgpack.
const (
	sha256A = "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
	sha256B = "3e23e8160039594a33894f6564e1b1348bbd7a0088d42c4acb73eeaed59c009d"
)
