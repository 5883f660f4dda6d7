package traces

import (
	"math/rand/v2"
	"reflect"
	"testing"
)

func azureLike(n int) []Request {
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]Request, n)
	for i := range reqs {
		reqs[i] = Request{ArrivalMs: int64(i * 100), InputTokens: 1 + rng.IntN(6000), OutputTokens: 1 + rng.IntN(400)}
	}
	return reqs
}

func TestSyntheticPrefixesDeterministic(t *testing.T) {
	reqs := azureLike(2000)
	a, err := SyntheticPrefixes(reqs, SyntheticOptions{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := SyntheticPrefixes(reqs, SyntheticOptions{Seed: 7})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same seed, different trees")
	}
	c, _ := SyntheticPrefixes(reqs, SyntheticOptions{Seed: 8})
	if reflect.DeepEqual(a, c) {
		t.Fatal("different seeds, same tree")
	}
	if reqs[0].HashIDs != nil {
		t.Fatal("input modified")
	}
}

// The tree must follow the Mooncake conventions: one id per 512-token block, ids dense in first-seen
// order, each id always at the same depth under the same parent with the same length.
func TestSyntheticPrefixesCleanTree(t *testing.T) {
	out, err := SyntheticPrefixes(azureLike(3000), SyntheticOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		parent int64
		depth  int
		length int
	}
	nodes := map[uint64]node{}
	var next uint64
	sessions := map[int]bool{}
	for i, r := range out {
		if len(r.HashIDs) != traceBlocks(r.InputTokens) {
			t.Fatalf("request %d: %d ids for %d tokens", i, len(r.HashIDs), r.InputTokens)
		}
		if r.Session < 1 {
			t.Fatalf("request %d: session %d", i, r.Session)
		}
		sessions[r.Session] = true
		parent := int64(-1)
		for d, id := range r.HashIDs {
			n := node{parent, d, min(TraceBlockTokens, r.InputTokens-d*TraceBlockTokens)}
			if old, ok := nodes[id]; ok {
				if old != n {
					t.Fatalf("request %d: id %d seen as %+v, now %+v", i, id, old, n)
				}
			} else {
				if id != next {
					t.Fatalf("request %d: new id %d, want dense id %d", i, id, next)
				}
				next++
				nodes[id] = n
			}
			parent = int64(id)
		}
	}
	blocks, tokens := ReuseBound(out, 512)
	t.Logf("%d sessions over %d requests; reuse bound %.3f of blocks, %.3f of tokens", len(sessions), len(out), blocks, tokens)
	if blocks < 0.1 || blocks > 0.9 {
		t.Errorf("reuse %.3f: the synthetic tree should share a fair part of its blocks", blocks)
	}
	if len(sessions) >= len(out) || len(sessions) < len(out)/10 {
		t.Errorf("%d sessions for %d requests: conversations not formed", len(sessions), len(out))
	}
}

func TestSyntheticPrefixesSingleTurn(t *testing.T) {
	out, err := SyntheticPrefixes(azureLike(500), SyntheticOptions{SingleTurn: true, Apps: 1, SystemPromptBlocksMin: 2, SystemPromptBlocksMax: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range out {
		if r.Session != i+1 {
			t.Fatalf("single turn: request %d in session %d", i, r.Session)
		}
		if full := r.InputTokens / TraceBlockTokens; full >= 2 && (r.HashIDs[0] != 0 || r.HashIDs[1] != 1) {
			t.Fatalf("request %d does not start with the one app's system prompt: %v", i, r.HashIDs[:2])
		}
	}
}

func TestSyntheticOptionsValidate(t *testing.T) {
	bad := []SyntheticOptions{
		{Apps: -1},
		{AppZipfExponent: -1},
		{SystemPromptBlocksMin: 3, SystemPromptBlocksMax: 2},
		{ContinueProbability: 1.5},
		{MaxOpenConversations: -3},
	}
	for _, o := range bad {
		if o.Validate() == nil {
			t.Errorf("%+v: want an error", o)
		}
		if _, err := SyntheticPrefixes(nil, o); err == nil {
			t.Errorf("%+v: SyntheticPrefixes accepted it", o)
		}
	}
	if err := (SyntheticOptions{}).Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSyntheticAzureConversation(t *testing.T) {
	reqs, err := LoadAzureFile(azureSample)
	if err != nil {
		t.Fatal(err)
	}
	out, err := SyntheticPrefixes(reqs, SyntheticOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []int{16, 512} {
		b, tok := ReuseBound(out, k)
		t.Logf("azure conv + synthetic prefixes, %d-token blocks: reuse bound %.4f of blocks, %.4f of tokens", k, b, tok)
	}
}
