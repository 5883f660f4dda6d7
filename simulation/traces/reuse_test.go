package traces

import (
	"math"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
)

// naiveReuse replays the blocks' sequence hashes through an infinite cache (a set). The trailing
// partial block is named by its sequence hash over (prefix, partial tokens).
func naiveReuse(reqs []Request, k int) (float64, float64) {
	seen := map[uint64]bool{}
	var refs, hits, toks, hitToks int
	for _, r := range reqs {
		tokens := Tokens(r, nil)
		var parent uint64
		for i := 0; i < len(tokens); i += k {
			blk := tokens[i:min(i+k, len(tokens))]
			h := blockhash.Local(blk, blockhash.Seed) ^ uint64(len(blk))<<56 // partial blocks differ by length
			if i > 0 {
				h = blockhash.Next(parent, h)
			}
			parent = h
			refs++
			toks += len(blk)
			if seen[h] {
				hits++
				hitToks += len(blk)
			}
			seen[h] = true
		}
	}
	return float64(hits) / float64(refs), float64(hitToks) / float64(toks)
}

func TestReuseBoundMatchesNaive(t *testing.T) {
	reqs := []Request{
		{InputTokens: 1030, HashIDs: []uint64{0, 1, 2}},
		{InputTokens: 1100, HashIDs: []uint64{0, 1, 3}},
		{InputTokens: 1030, HashIDs: []uint64{0, 1, 2}},
		{InputTokens: 600, HashIDs: []uint64{0, 4}},
		{InputTokens: 300, HashIDs: []uint64{5}},
		{InputTokens: 1536, HashIDs: []uint64{0, 1, 6}},
		{InputTokens: 2000, HashIDs: []uint64{0, 1, 6, 7}},
	}
	for _, k := range []int{1, 16, 64, 512} {
		b, tok := ReuseBound(reqs, k)
		nb, ntok := naiveReuse(reqs, k)
		if math.Abs(b-nb) > 1e-12 || math.Abs(tok-ntok) > 1e-12 {
			t.Errorf("block %d: ReuseBound = (%v, %v), naive = (%v, %v)", k, b, tok, nb, ntok)
		}
	}
}

func TestReuseBoundConversationTrace(t *testing.T) {
	reqs, err := LoadMooncakeFile(MooncakeConversation)
	if err != nil {
		t.Fatal(err)
	}
	blocks, tokens := ReuseBound(reqs, 512)
	t.Logf("512-token blocks: %.4f of blocks, %.4f of tokens", blocks, tokens)
	if math.Abs(blocks-0.3664) > 0.0005 {
		t.Errorf("block hit fraction %.5f, want 0.3664 ± 0.0005 (README)", blocks)
	}
	if math.Abs(tokens-0.374) > 0.001 {
		t.Errorf("token hit fraction %.5f, want 0.374 ± 0.001 (README)", tokens)
	}
	for _, k := range []int{16, 64} {
		b, tok := ReuseBound(reqs, k)
		t.Logf("%d-token blocks: %.4f of blocks, %.4f of tokens", k, b, tok)
		if tok < tokens-0.001 || tok > tokens+0.001 {
			t.Errorf("block %d: token hit fraction %.5f, want ≈ %.5f (splitting blocks changes no tokens' fate)", k, tok, tokens)
		}
		if !testing.Short() && k == 64 { // the naive replay hashes every token: a prefix of the trace
			head := reqs[:2000]
			b, tok := ReuseBound(head, k)
			nb, ntok := naiveReuse(head, k)
			if math.Abs(b-nb) > 1e-12 || math.Abs(tok-ntok) > 1e-12 {
				t.Errorf("block %d, first 2000 requests: ReuseBound (%v, %v) != naive (%v, %v)", k, b, tok, nb, ntok)
			}
		}
	}
}

func TestReuseBoundPanicsOnBadBlock(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("want a panic for a block size that does not divide 512")
		}
	}()
	ReuseBound(nil, 24)
}
