package blockhash

import (
	"testing"

	"github.com/zeebo/xxh3"
)

// The vectors of SPEC §3 (block size 4).
func TestSpecVectors(t *testing.T) {
	if got := xxh3.HashSeed([]byte("test data"), Seed); got != 13226331709069118873 {
		t.Fatalf("xxh3(test data, 1337) = %d", got)
	}
	tokens := []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
	local := LocalHashes(nil, tokens, 4, Seed)
	wantLocal := []uint64{14643705804678351452, 16777012769546811212, 483935686894639516}
	if len(local) != 3 {
		t.Fatalf("partial block hashed: %d hashes", len(local))
	}
	for i := range wantLocal {
		if local[i] != wantLocal[i] {
			t.Errorf("local[%d] = %d, want %d", i, local[i], wantLocal[i])
		}
	}
	seq := Sequence(nil, local)
	if seq[0] != local[0] || seq[1] != 4945711292740353085 || seq[2] != 12583592247330656132 {
		t.Errorf("seq = %v", seq)
	}
	if got := SequenceFrom(nil, seq[0], true, local[1:]); got[0] != seq[1] || got[1] != seq[2] {
		t.Errorf("SequenceFrom = %v", got)
	}
}

func TestLoRASeed(t *testing.T) {
	if LoRASeed("") != Seed {
		t.Fatal("empty LoRA name must be the base seed")
	}
	name := "my-adapter"
	if LoRASeed(name) != Seed+xxh3.HashString(name) {
		t.Fatal("LoRA seed rule")
	}
	a := Local([]uint32{1, 2, 3, 4}, Seed)
	b := Local([]uint32{1, 2, 3, 4}, LoRASeed(name))
	if a == b {
		t.Fatal("LoRA must change local hashes")
	}
}

func TestMultimodalSorted(t *testing.T) {
	toks := []uint32{1, 2, 3, 4}
	x := LocalMultimodal(toks, []uint64{9, 3}, Seed)
	y := LocalMultimodal(toks, []uint64{3, 9}, Seed)
	if x != y {
		t.Fatal("multimodal hashes must be sorted before hashing")
	}
	if x == Local(toks, Seed) {
		t.Fatal("multimodal objects must change the hash")
	}
	if LocalMultimodal(toks, nil, Seed) != Local(toks, Seed) {
		t.Fatal("no objects = plain block")
	}
}

func BenchmarkHash32kPrompt(b *testing.B) {
	tokens := make([]uint32, 32768)
	for i := range tokens {
		tokens[i] = uint32(i * 7)
	}
	local := make([]uint64, 0, 2048)
	seq := make([]uint64, 0, 2048)
	b.SetBytes(int64(4 * len(tokens)))
	b.ReportAllocs()
	for b.Loop() {
		local = LocalHashes(local[:0], tokens, 16, Seed)
		seq = Sequence(seq[:0], local)
	}
}
