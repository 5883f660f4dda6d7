package core

import (
	"errors"
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

func TestNormalizeMMItems(t *testing.T) {
	toks := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}
	base := RouteInput{Pool: "p", TokenIDs: toks}
	plain, err := base.normalize(4, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plain.SeqHashes, blockhash.Sequence(nil, blockhash.LocalHashes(nil, toks, 4, blockhash.Seed))) {
		t.Fatal("text-only prompt must hash as before")
	}
	withA := base
	withA.MMItems = []blockhash.MMItem{{Hash: 11, Offset: 4, Length: 3}}
	a, err := withA.normalize(4, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if a.SeqHashes[0] != plain.SeqHashes[0] || a.SeqHashes[1] == plain.SeqHashes[1] {
		t.Fatalf("the image block must differ, the one before it not: %v vs %v", a.SeqHashes, plain.SeqHashes)
	}
	want := blockhash.Sequence(nil, blockhash.LocalHashesMM(nil, toks, 4, blockhash.Seed, withA.MMItems))
	if !slices.Equal(a.SeqHashes, want) {
		t.Fatalf("got %v want %v", a.SeqHashes, want)
	}
	for _, bad := range []RouteInput{
		{Pool: "p", TokenIDs: toks, MMItems: []blockhash.MMItem{{Hash: 1, Offset: 8, Length: 2}}},
		{Pool: "p", TokenIDs: toks, MMItems: []blockhash.MMItem{{Hash: 1, Offset: -1, Length: 1}}},
		{Pool: "p", TokenIDs: toks, MMItems: []blockhash.MMItem{{Hash: 1, Offset: 0, Length: 0}}},
		{Pool: "p", LocalHashes: []Hash{1}, MMItems: []blockhash.MMItem{{Hash: 1, Offset: 0, Length: 1}}},
	} {
		if _, err := bad.normalize(4, 1<<20); !errors.Is(err, statestore.ErrInvalid) {
			t.Errorf("%+v: want ErrInvalid, got %v", bad.MMItems, err)
		}
	}
}
