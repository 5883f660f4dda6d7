package mock

import (
	"slices"
	"testing"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/ingest/vllmwire"
	"github.com/kvrouter/kvrouter/simulation/engine"
)

func imageChat(text, url, uuid string) []map[string]any {
	img := map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}}
	if uuid != "" {
		img["uuid"] = uuid
	}
	return []map[string]any{{"role": "user", "content": []map[string]any{{"type": "text", "text": text}, img}}}
}

// TestMultimodalChat: with ImageTokens, an image part expands to its placeholder run in /tokenize and
// in the served prompt, and the engine's cached blocks fold the image's identity: the part's uuid
// when given, else blockhash.MMIdentifier of its URL.
func TestMultimodalChat(t *testing.T) {
	s := startServer(t, Config{ImageTokens: 6, Engine: engine.Options{BlockSize: 4, NumBlocks: 4096}})
	for _, c := range []struct{ url, uuid, id string }{
		{"https://example.com/a.png", "", blockhash.MMIdentifier("https://example.com/a.png", "")},
		{"https://example.com/a.png", "my-uuid", "my-uuid"},
	} {
		postJSON(t, s.URL()+"/admin/restart", struct{}{}, nil)
		msgs := imageChat("look at this picture", c.url, c.uuid)
		var tok tokenizeResponse
		postJSON(t, s.URL()+"/tokenize", map[string]any{"messages": msgs, "return_token_strs": true}, &tok)
		// user: look at this picture <start> 6×<image> <end> assistant: → 17 tokens, the run at 6..11.
		want := append(Tokenize("user: look at this picture"), ImageStartToken)
		for range 6 {
			want = append(want, ImageTokenID)
		}
		want = append(append(want, ImageEndToken), Tokenize("assistant:")...)
		if !slices.Equal(tok.Tokens, want) || tok.TokenStrs[6] != "<image>" {
			t.Fatalf("tokens %v strs %v, want %v", tok.Tokens, tok.TokenStrs, want)
		}
		postJSON(t, s.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 1}, nil)
		waitFor(t, "engine quiescent", idleEngine(s))
		items := []blockhash.MMItem{{Hash: blockhash.MMIdentifierHash(c.id), Offset: 6, Length: 6}}
		seqs := blockhash.Sequence(nil, blockhash.LocalHashesMM(nil, want, 4, blockhash.Seed, items))
		slices.Sort(seqs)
		if got := s.Blocks().SeqHashes; !slices.Equal(got, seqs) {
			t.Fatalf("cached %v, want %v", got, seqs)
		}
	}
	// Without ImageTokens, image parts are ignored (a text-only engine).
	msgs := imageChat("hi", "https://example.com/a.png", "")
	p, err := renderChat(toMessages(t, msgs), true, 0)
	if err != nil || !slices.Equal(p.toks, Tokenize("user: hi assistant:")) || p.items != nil {
		t.Fatalf("text-only engine: %+v, %v", p, err)
	}
}

// TestBlockExtraKeysPublished: a stored block overlapping an image carries its (identifier, offset)
// pair as vLLM 0.19+ publishes it; other blocks carry None, and text-only events no extra_keys.
func TestBlockExtraKeysPublished(t *testing.T) {
	items := []mmItem{{identifier: "img", offset: 6, length: 6}}
	if got := blockExtraKeys(items, 4, 4); !slices.Equal(got, []vllmwire.ExtraKey{{Identifier: "img", Pair: true, Offset: 2}}) {
		t.Fatalf("block 1: %+v", got)
	}
	if got := blockExtraKeys(items, 8, 4); !slices.Equal(got, []vllmwire.ExtraKey{{Identifier: "img", Pair: true, Offset: -2}}) {
		t.Fatalf("block 2: %+v", got)
	}
	if blockExtraKeys(items, 0, 4) != nil || blockExtraKeys(items, 12, 4) != nil {
		t.Fatal("blocks outside the run: no keys")
	}
	e, err := NewEngine(Config{ImageTokens: 6, Engine: engine.Options{BlockSize: 4, NumBlocks: 64}})
	if err != nil {
		t.Fatal(err)
	}
	e.blockTok[10] = &tokRef{tokens: []uint32{1, 2, 3, 4}}
	e.blockTok[11] = &tokRef{tokens: []uint32{5, 99, 99, 99}, extra: blockExtraKeys(items, 4, 4)}
	decode := func(evs []engine.Event) vllmwire.Event {
		t.Helper()
		b, err := vllmwire.Decode(e.encode(evs))
		if err != nil || len(b.Events) != 1 {
			t.Fatalf("%+v, %v", b, err)
		}
		return b.Events[0]
	}
	ev := decode([]engine.Event{{Kind: engine.EventStored, Blocks: []engine.StoredBlock{{EngineHash: 10, LocalHash: 1}, {EngineHash: 11, LocalHash: 2}}}})
	if len(ev.ExtraKeys) != 2 || ev.ExtraKeys[0] != nil || !slices.Equal(ev.ExtraKeys[1], e.blockTok[11].extra) {
		t.Fatalf("extra_keys %+v", ev.ExtraKeys)
	}
	if ev := decode([]engine.Event{{Kind: engine.EventStored, Blocks: []engine.StoredBlock{{EngineHash: 10, LocalHash: 1}}}}); ev.ExtraKeys != nil {
		t.Fatalf("text-only event: extra_keys %+v", ev.ExtraKeys)
	}
}

// TestSubmitExtraKeysPerPosition: blocks inside one long image have identical tokens and local hashes,
// yet each carries its own offset (the mock keys blocks by engine hash, one per prefix position).
func TestSubmitExtraKeysPerPosition(t *testing.T) {
	e, err := NewEngine(Config{ImageTokens: 12, Engine: engine.Options{BlockSize: 4, NumBlocks: 64}})
	if err != nil {
		t.Fatal(err)
	}
	toks := []uint32{500, 97, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 98, 501}
	r, err := e.submit(toks, []mmItem{{identifier: "img", offset: 2, length: 12}}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var offsets []int64
	for _, h := range r.blocks {
		offsets = append(offsets, e.blockTok[h].extra[0].Offset)
	}
	if !slices.Equal(offsets, []int64{2, -2, -6, -10}) {
		t.Fatalf("offsets %v, want [2 -2 -6 -10]", offsets)
	}
}
