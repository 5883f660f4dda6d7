package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// bySegments encodes text the way a segment cache does: added ids as they come, every text part
// on its own.
func bySegments(t *testing.T, sg Segmenter, text string) []uint32 {
	t.Helper()
	var ids []uint32
	err := sg.Segments(text, func(part string, added bool, id uint32) error {
		if part == "" {
			t.Fatalf("Segments(%q) emitted an empty part", text)
		}
		if added {
			ids = append(ids, id)
			return nil
		}
		var err error
		ids, err = sg.AppendSegment(ids, part)
		return err
	})
	if err != nil {
		t.Fatalf("Segments(%q): %v", text, err)
	}
	return ids
}

// TestSegmentsConcatenateToEncode verifies the claim the gateway's chat prefix cache rests on:
// BPE never merges across an added token, so encoding each segment on its own and concatenating
// gives Encode's ids exactly — on real vocabularies (Llama-3 tokenizer.json and tiktoken, Kimi-K2,
// Cohere) with random texts full of added tokens, and on a synthetic file whose added tokens use
// lstrip/rstrip/single_word and a normaliser.
func TestSegmentsConcatenateToEncode(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for _, file := range []string{llamaJSON, llamaTiktoken, kimiTiktoken, cohereJSON} {
		tk := loadData(t, file).(Segmenter)
		for i := 0; i < 300; i++ {
			text := randomText(rng, 1+rng.IntN(40))
			if got, want := bySegments(t, tk, text), mustEncode(t, tk, text); !slices.Equal(got, want) {
				t.Fatalf("%s: %q\nsegments %v\n  encode %v", file, text, got, want)
			}
		}
	}
	added := []map[string]any{
		{"id": 300, "content": "<mask>", "single_word": true, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
		{"id": 301, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		{"id": 303, "content": "café", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false},
	}
	tk, err := Load(synthetic(t, []string{"ab", "abc"}, [][2]string{{"a", "b"}, {"ab", "c"}}, map[string]any{"added_tokens": added, "normalizer": map[string]any{"type": "NFC"}}))
	if err != nil {
		t.Fatal(err)
	}
	atoms := []string{"<mask>", " ", "\t", "<s>", "ab", "c", "x", "cafe\u0301", "café", ",", "\n"}
	for i := 0; i < 2000; i++ {
		var text string
		for n := rng.IntN(12); n >= 0; n-- {
			text += atoms[rng.IntN(len(atoms))]
		}
		if got, want := bySegments(t, tk.(Segmenter), text), encodeOK(t, tk, text); !slices.Equal(got, want) {
			t.Fatalf("synthetic: %q\nsegments %v\n  encode %v", text, got, want)
		}
	}
}

// TestPrefix: Prefix is the post-processor's BOS whatever AddBOS says, and nil without one.
func TestPrefix(t *testing.T) {
	if got := loadData(t, llamaJSON).(Segmenter).Prefix(); !slices.Equal(got, []uint32{128000}) {
		t.Errorf("Llama-3 tokenizer.json Prefix() = %v, want [128000]", got)
	}
	if got := loadData(t, llamaTiktoken).(Segmenter).Prefix(); !slices.Equal(got, []uint32{128000}) {
		t.Errorf("Llama-3 tiktoken Prefix() = %v, want [128000]", got)
	}
	tk, err := Load(synthetic(t, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := tk.(Segmenter).Prefix(); got != nil {
		t.Errorf("no post-processor: Prefix() = %v, want nil", got)
	}
}
