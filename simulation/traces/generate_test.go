package traces

import (
	"encoding/json"
	"reflect"
	"testing"
)

func mustGenerate(t *testing.T, o GenerateOptions) []Request {
	t.Helper()
	reqs, err := Generate(o)
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// Same seed → same bytes; another seed → other requests; every kind is a clean Mooncake-style tree.
func TestGenerateDeterministic(t *testing.T) {
	for _, kind := range WorkloadKinds {
		t.Run(kind, func(t *testing.T) {
			o := GenerateOptions{Kind: kind, Requests: 600, Seed: 3}
			a, _ := json.Marshal(mustGenerate(t, o))
			b, _ := json.Marshal(mustGenerate(t, o))
			if string(a) != string(b) {
				t.Fatal("same seed, different bytes")
			}
			o.Seed = 4
			c, _ := json.Marshal(mustGenerate(t, o))
			if string(a) == string(c) {
				t.Fatal("different seeds, same bytes")
			}
			reqs := mustGenerate(t, GenerateOptions{Kind: kind, Requests: 600, Seed: 3})
			if len(reqs) != 600 || reqs[0].ArrivalMs != 0 {
				t.Fatalf("%d requests, first at %d ms", len(reqs), reqs[0].ArrivalMs)
			}
			checkCleanTree(t, reqs)
		})
	}
}

// checkCleanTree: arrivals sorted, one id per 512-token block, ids dense in first-seen order, and
// every id always under the same parent.
func checkCleanTree(t *testing.T, reqs []Request) {
	t.Helper()
	parent := map[uint64]int64{}
	var next uint64
	for i, r := range reqs {
		if i > 0 && r.ArrivalMs < reqs[i-1].ArrivalMs {
			t.Fatalf("request %d arrives before request %d", i, i-1)
		}
		if len(r.HashIDs) != traceBlocks(r.InputTokens) || r.OutputTokens < 1 {
			t.Fatalf("request %d: %d ids for %d tokens, output %d", i, len(r.HashIDs), r.InputTokens, r.OutputTokens)
		}
		for j, id := range r.HashIDs {
			if id > next {
				t.Fatalf("request %d: id %d not dense (next %d)", i, id, next)
			}
			if id == next {
				next++
			}
			p := int64(-1)
			if j > 0 {
				p = int64(r.HashIDs[j-1])
			}
			if q, ok := parent[id]; ok && q != p {
				t.Fatalf("request %d: id %d under %d, earlier under %d", i, id, p, q)
			}
			parent[id] = p
		}
	}
}

func TestGenerateShapes(t *testing.T) {
	// shared-prefix: 64 prompts of 16 blocks, reuse close to 8192/(8192+512).
	sp := mustGenerate(t, GenerateOptions{Kind: WorkloadSharedPrefix, Requests: 2000, Seed: 1})
	if hit, _ := ReuseBound(sp, 64); hit < 0.88 || hit > 0.97 {
		t.Errorf("shared-prefix reuse bound %.3f, want ~0.9", hit)
	}
	// multi-turn: a later turn of a session extends its previous prompt.
	mt := mustGenerate(t, GenerateOptions{Kind: WorkloadMultiTurn, Requests: 2000, Seed: 1})
	last := map[int]Request{}
	grew := 0
	for _, r := range mt {
		if p, ok := last[r.Session]; ok {
			full := p.InputTokens / TraceBlockTokens
			if r.InputTokens <= p.InputTokens || !reflect.DeepEqual(r.HashIDs[:full], p.HashIDs[:full]) {
				t.Fatalf("session %d: turn does not extend the previous prompt", r.Session)
			}
			grew++
		}
		last[r.Session] = r
	}
	if grew < 1000 {
		t.Errorf("only %d continued turns in 2000 requests", grew)
	}
	// fanout: groups of 8 siblings with one prompt and one arrival.
	fo := mustGenerate(t, GenerateOptions{Kind: WorkloadFanout, Requests: 800, Seed: 1})
	for i := 0; i+8 <= len(fo); i += 8 {
		for k := 1; k < 8; k++ {
			if fo[i+k].Session != fo[i].Session || fo[i+k].ArrivalMs != fo[i].ArrivalMs || !reflect.DeepEqual(fo[i+k].HashIDs, fo[i].HashIDs) {
				t.Fatalf("task at %d: sibling %d differs", i, k)
			}
		}
	}
	// mix: all three shapes, a third each.
	mx := mustGenerate(t, GenerateOptions{Kind: WorkloadMix, Requests: 900, Seed: 1})
	if len(mx) != 900 {
		t.Fatalf("mix: %d requests", len(mx))
	}
	if m := mustGenerate(t, GenerateOptions{Kind: WorkloadMix, Requests: 1, Seed: 1}); len(m) != 1 {
		t.Fatalf("mix of 1: %d requests", len(m))
	}
}

func TestGenerateValidate(t *testing.T) {
	for _, o := range []GenerateOptions{
		{Kind: "nope"},
		{Kind: WorkloadFanout, Requests: -1},
		{Kind: WorkloadFanout, RateReqS: -1},
		{Kind: WorkloadFanout, UserTokens: 1},
		{Kind: WorkloadMultiTurn, Turns: -2},
		{Kind: WorkloadFanout, Siblings: 5000},
	} {
		if _, err := Generate(o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
