package traces

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

func TestTokensDynamoConvention(t *testing.T) {
	req := Request{InputTokens: 1030, HashIDs: []uint64{7, 1 << 33, 9}}
	toks := Tokens(req, nil)
	if len(toks) != 1030 {
		t.Fatalf("len %d", len(toks))
	}
	for i, tok := range toks {
		want := []uint32{7, 0, 9}[i/512] // uint32(1<<33) = 0
		if tok != want {
			t.Fatalf("token %d = %d, want %d", i, tok, want)
		}
	}
	if got := Tokens(Request{InputTokens: 100}, []uint32{1}); len(got) != 1 {
		t.Fatalf("request without ids must add no tokens, got %d", len(got))
	}
}

// BlockHashes must equal hashing Tokens(req) with blockhash, for fast and slow paths, LoRA or not.
func TestBlockHashesMatchTokens(t *testing.T) {
	reqs := []Request{
		{InputTokens: 0},
		{InputTokens: 15, HashIDs: []uint64{3}},
		{InputTokens: 512, HashIDs: []uint64{3}},
		{InputTokens: 1030, HashIDs: []uint64{0, 5, 9}},
		{InputTokens: 1535, HashIDs: []uint64{0, 5, 11}},
		{InputTokens: 2048, HashIDs: []uint64{0, 5, 11, 12}},
		{InputTokens: 700, HashIDs: nil},
	}
	for _, req := range reqs {
		for _, k := range []int{1, 16, 64, 512, 24, 1000} {
			for _, lora := range []string{"", "adapter-a"} {
				seed := blockhash.LoRASeed(lora)
				wantLocal := blockhash.LocalHashes(nil, Tokens(req, nil), k, seed)
				wantSeq := blockhash.Sequence(nil, wantLocal)
				local, seq := BlockHashes(req, k, lora)
				if !slices.Equal(local, wantLocal) || !slices.Equal(seq, wantSeq) {
					t.Errorf("input %d, block %d, lora %q: got %d/%d hashes, want %d", req.InputTokens, k, lora,
						len(local), len(seq), len(wantLocal))
				}
			}
		}
	}
}

func TestAppendBlockHashesReusesBuffers(t *testing.T) {
	req := Request{InputTokens: 4096, HashIDs: []uint64{0, 1, 2, 3, 4, 5, 6, 7}}
	local := make([]uint64, 0, 256)
	seq := make([]uint64, 0, 256)
	allocs := testing.AllocsPerRun(20, func() {
		local, seq = AppendBlockHashes(local[:0], seq[:0], req, 16, "")
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call with reused buffers", allocs)
	}
	// Appending keeps what dst held.
	l2, s2 := AppendBlockHashes([]uint64{42}, []uint64{43}, req, 512, "")
	if len(l2) != 9 || l2[0] != 42 || s2[0] != 43 || s2[1] != l2[1] {
		t.Fatalf("append semantics broken: %v %v", l2[:2], s2[:2])
	}
}

func BenchmarkBlockHashesConversationTrace(b *testing.B) {
	reqs, err := LoadMooncakeFile(MooncakeConversation)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range []int{16, 64, 512} {
		b.Run(map[int]string{16: "block16", 64: "block64", 512: "block512"}[k], func(b *testing.B) {
			var local, seq []uint64
			b.ReportAllocs()
			for b.Loop() {
				for _, r := range reqs {
					local, seq = AppendBlockHashes(local[:0], seq[:0], r, k, "")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(reqs)), "ns/request")
		})
	}
}
