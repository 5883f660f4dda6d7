package blockhash

import (
	"encoding/binary"
	"slices"
	"testing"

	"github.com/zeebo/xxh3"
)

// Vectors of the multimodal identity rules (docs/API.md "Multimodal block identity"); the SHA-256
// digests agree with sha256sum.
func TestMMIdentifierVectors(t *testing.T) {
	cases := []struct{ url, uuid, want string }{
		// 8 PNG signature bytes as a data URI: SHA-256 of the decoded bytes.
		{"data:image/png;base64,iVBORw0KGgo=", "", "4c4b6a3be1314ab86138bef4314dde022e600960d8689a2c8f8631802d20dab6"},
		{"data:image/jpeg;base64,iVBORw0KGgo", "", "4c4b6a3be1314ab86138bef4314dde022e600960d8689a2c8f8631802d20dab6"},
		{"https://example.com/cat.png", "", "89f18b17905ce590a4bc6105cf89117b5fd294b67bd1702849aaf446ec1abbd8"},
		// A client's uuid wins over the data: SHA-256 of "uuid:img-1".
		{"https://example.com/cat.png", "img-1", "e48d2df5829bc18a15b28d930cff23cef979af435ca2937a70d30b32cdb0e39f"},
	}
	for _, c := range cases {
		if got := MMIdentifier(c.url, c.uuid); got != c.want {
			t.Errorf("MMIdentifier(%q, %q) = %s, want %s", c.url, c.uuid, got, c.want)
		}
	}
}

func TestMMIdentifierHash(t *testing.T) {
	canon := "4c4b6a3be1314ab86138bef4314dde022e600960d8689a2c8f8631802d20dab6"
	if !IsCanonicalMMIdentifier(canon) || IsCanonicalMMIdentifier(canon[1:]) || IsCanonicalMMIdentifier(canon[:63]+"g") {
		t.Fatal("canonical identifier = exactly 64 hex digits")
	}
	// First 16 hex digits, big-endian: 0x4c4b6a3be1314ab8.
	if got := MMIdentifierHash(canon); got != 5497604575549541048 {
		t.Errorf("canonical: %d", got)
	}
	if MMIdentifierHash("4C4B6A3BE1314AB86138BEF4314DDE022E600960D8689A2C8F8631802D20DAB6") != 5497604575549541048 {
		t.Error("upper-case hex must read the same")
	}
	if got := MMIdentifierHash("img-1"); got != xxh3.HashString("img-1") || got != 14770383865288705413 {
		t.Errorf("other strings: XXH3-64 seed 0, got %d", got)
	}
}

// LocalMultimodal's byte layout, written out: tokens u32 LE then the sorted hashes u64 LE, XXH3 seed 1337.
func TestLocalMultimodalLayout(t *testing.T) {
	b := []byte{}
	for _, tok := range []uint32{1, 2, 3, 4} {
		b = binary.LittleEndian.AppendUint32(b, tok)
	}
	b = binary.LittleEndian.AppendUint64(b, 1)
	b = binary.LittleEndian.AppendUint64(b, 2)
	want := xxh3.HashSeed(b, Seed)
	if got := LocalMultimodal([]uint32{1, 2, 3, 4}, []uint64{2, 1}, Seed); got != want || got != 5514711936906046382 {
		t.Fatalf("LocalMultimodal = %d, want %d (5514711936906046382)", got, want)
	}
	if got := LocalMultimodal([]uint32{1, 2, 3, 4}, []uint64{5497604575549541048}, Seed); got != 8742169680191186150 {
		t.Fatalf("LocalMultimodal with the canonical vector = %d", got)
	}
}

func TestBlockMMHashes(t *testing.T) {
	// Block size 4, 14 tokens = 3 full blocks. Item A covers tokens 2..5 (blocks 0, 1); B covers 8..8
	// (block 2); C covers 12..13 (the partial block: never hashed).
	items := []MMItem{{Hash: 10, Offset: 2, Length: 4}, {Hash: 20, Offset: 8, Length: 1}, {Hash: 30, Offset: 12, Length: 2}}
	got := BlockMMHashes(items, 14, 4)
	want := [][]uint64{{10}, {10}, {20}}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("block %d: %v, want %v", i, got[i], want[i])
		}
	}
	if BlockMMHashes(nil, 14, 4) != nil || BlockMMHashes([]MMItem{{Hash: 1, Offset: 12, Length: 2}}, 14, 4) != nil {
		t.Error("no overlap with a full block: nil")
	}
	// Two items in one block: both, in item order (LocalMultimodal sorts).
	two := BlockMMHashes([]MMItem{{Hash: 9, Offset: 0, Length: 1}, {Hash: 3, Offset: 2, Length: 1}}, 4, 4)
	if len(two) != 1 || !slices.Equal(two[0], []uint64{9, 3}) {
		t.Errorf("two items in a block: %v", two)
	}
}

func TestLocalHashesMM(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	plain := LocalHashes(nil, toks, 4, Seed)
	if got := LocalHashesMM(nil, toks, 4, Seed, nil); !slices.Equal(got, plain) {
		t.Fatal("no items: must equal LocalHashes")
	}
	got := LocalHashesMM(nil, toks, 4, Seed, []MMItem{{Hash: 7, Offset: 5, Length: 2}})
	if got[0] != plain[0] || got[2] != plain[2] {
		t.Error("blocks without items must hash as plain blocks")
	}
	if got[1] != LocalMultimodal(toks[4:8], []uint64{7}, Seed) || got[1] == plain[1] {
		t.Error("the block with the item must fold its hash")
	}
	other := LocalHashesMM(nil, toks, 4, Seed, []MMItem{{Hash: 8, Offset: 5, Length: 2}})
	if other[1] == got[1] {
		t.Error("different items must give different blocks")
	}
}
