package tokenizer

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// synthetic builds a small byte-level tokenizer.json: ids 0..255 are the bytes, extra tokens
// follow in order. Fields of override replace the defaults (null normalizer, ByteLevel
// pre-tokenizer without regex, no added tokens).
func synthetic(t *testing.T, extra []string, merges [][2]string, override map[string]any) string {
	t.Helper()
	vocab := map[string]int{}
	for b := 0; b < 256; b++ {
		vocab[string(runeOfByte[b])] = b
	}
	for i, tok := range extra {
		vocab[byteLevelText(tok)] = 256 + i
	}
	ml := make([]string, len(merges))
	for i, m := range merges {
		ml[i] = byteLevelText(m[0]) + " " + byteLevelText(m[1])
	}
	f := map[string]any{
		"version":        "1.0",
		"added_tokens":   []any{},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		"post_processor": nil,
		"model": map[string]any{
			"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": ml,
		},
	}
	for k, v := range override {
		if k == "ignore_merges" {
			f["model"].(map[string]any)[k] = v
			continue
		}
		f[k] = v
	}
	data, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "tokenizer.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// byteLevelText writes raw text in the byte-level alphabet, as tokenizer.json vocabularies are.
func byteLevelText(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteRune(runeOfByte[s[i]])
	}
	return b.String()
}

func encodeOK(t *testing.T, tk Tokenizer, s string) []uint32 {
	t.Helper()
	ids, err := tk.Encode(s)
	if err != nil {
		t.Fatalf("Encode(%q): %v", s, err)
	}
	return ids
}

// TestMergeRanksNotTokenIDs: Hugging Face merges by merge-list order, not by token id. Here
// "b c" ranks first although "ab" has the smaller id, so "abc" becomes a + bc (tiktoken's rule
// would give ab, then abc). With ignore_merges the whole word wins.
func TestMergeRanksNotTokenIDs(t *testing.T) {
	extra := []string{"ab", "bc", "abc"} // ids 256, 257, 258
	merges := [][2]string{{"b", "c"}, {"a", "b"}, {"ab", "c"}}
	tk, err := Load(synthetic(t, extra, merges, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeOK(t, tk, "abc"), []uint32{'a', 257}; !slices.Equal(got, want) {
		t.Errorf("abc → %v, want %v", got, want)
	}
	if got, want := encodeOK(t, tk, "abcab"), []uint32{'a', 257, 256}; !slices.Equal(got, want) {
		t.Errorf("abcab → %v, want %v", got, want)
	}
	tk, err = Load(synthetic(t, extra, merges, map[string]any{"ignore_merges": true}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeOK(t, tk, "abc"), []uint32{258}; !slices.Equal(got, want) {
		t.Errorf("ignore_merges: abc → %v, want %v", got, want)
	}
	// Equal ranks resolve leftmost first: "aaa" → aa + a.
	tk, err = Load(synthetic(t, []string{"aa"}, [][2]string{{"a", "a"}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeOK(t, tk, "aaa"), []uint32{256, 'a'}; !slices.Equal(got, want) {
		t.Errorf("aaa → %v, want %v", got, want)
	}
}

// TestMergesAsPairs: tokenizers ≥ 0.20 write merges as [left, right] arrays.
func TestMergesAsPairs(t *testing.T) {
	path := synthetic(t, []string{"ab"}, nil, nil)
	data, _ := os.ReadFile(path)
	var f map[string]any
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	f["model"].(map[string]any)["merges"] = [][]string{{"a", "b"}}
	data, _ = json.Marshal(f)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	tk, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := encodeOK(t, tk, "ab"); !slices.Equal(got, []uint32{256}) {
		t.Errorf("ab → %v", got)
	}
}

// TestGPT2ByteLevel: ByteLevel with use_regex splits with GPT-2's pattern (no merge crosses a
// word boundary), and add_prefix_space adds a space before text that lacks one.
func TestGPT2ByteLevel(t *testing.T) {
	extra := []string{" a", " a a"} // " a a" is unreachable: the regex splits " a", " a"
	merges := [][2]string{{" ", "a"}, {" a", " a"}}
	pre := map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true}
	tk, err := Load(synthetic(t, extra, merges, map[string]any{"pre_tokenizer": pre}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := encodeOK(t, tk, "a a"), []uint32{256, 256}; !slices.Equal(got, want) {
		t.Errorf("a a → %v, want %v", got, want)
	}
}

// TestAddedTokenRules follows Hugging Face's added-vocabulary behaviour: leftmost-longest
// matches, lstrip/rstrip swallowing whitespace, single_word refusing matches inside words,
// normalized tokens matched after the normalizer, and non-special added tokens split out too.
func TestAddedTokenRules(t *testing.T) {
	added := []map[string]any{
		{"id": 300, "content": "<mask>", "single_word": true, "lstrip": true, "rstrip": true, "normalized": false, "special": true},
		{"id": 301, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		{"id": 302, "content": "<s>x", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
		{"id": 303, "content": "café", "single_word": false, "lstrip": false, "rstrip": false, "normalized": true, "special": false},
		{"id": 304, "content": "<think>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false},
	}
	tk, err := Load(synthetic(t, nil, nil, map[string]any{"added_tokens": added, "normalizer": map[string]any{"type": "NFC"}}))
	if err != nil {
		t.Fatal(err)
	}
	bytesOf := func(s string) []uint32 {
		var ids []uint32
		for i := 0; i < len(s); i++ {
			ids = append(ids, uint32(s[i]))
		}
		return ids
	}
	cat := func(parts ...[]uint32) []uint32 { return slices.Concat(parts...) }
	cases := []struct {
		text string
		want []uint32
	}{
		// Longest match wins at the same start.
		{"<s>x<s>", []uint32{302, 301}},
		// lstrip and rstrip take the spaces (and tabs) around <mask>.
		{"Hi <mask> there", cat(bytesOf("Hi"), []uint32{300}, bytesOf("there"))},
		{"a\t<mask>\t<mask>\u2000", cat(bytesOf("a"), []uint32{300, 300})},
		// single_word: no match glued to a word character.
		{"A<mask> <mask>ony", bytesOf("A<mask> <mask>ony")},
		{"<mask>, x", cat([]uint32{300}, bytesOf(", x"))},
		// normalized: the decomposed "café" matches after NFC.
		{"un cafe\u0301", cat(bytesOf("un "), []uint32{303})},
		// Non-special added tokens are split out as well (encode with add_special_tokens=False).
		{"<think>ok", cat([]uint32{304}, bytesOf("ok"))},
	}
	for _, c := range cases {
		if got := encodeOK(t, tk, c.text); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q)\n got %v\nwant %v", c.text, got, c.want)
		}
	}
}

// TestPostProcessorBOS: AddBOS takes the template's leading special tokens, Roberta's cls, and
// fails when the file defines none.
func TestPostProcessorBOS(t *testing.T) {
	template := map[string]any{
		"type": "TemplateProcessing",
		"single": []any{
			map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}},
			map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}},
			map[string]any{"SpecialToken": map[string]any{"id": "</s>", "type_id": 0}},
		},
		"special_tokens": map[string]any{
			"<s>":  map[string]any{"id": "<s>", "ids": []int{1}, "tokens": []string{"<s>"}},
			"</s>": map[string]any{"id": "</s>", "ids": []int{2}, "tokens": []string{"</s>"}},
		},
	}
	seq := map[string]any{"type": "Sequence", "processors": []any{
		map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
		template,
	}}
	roberta := map[string]any{"type": "RobertaProcessing", "sep": []any{"</s>", 2}, "cls": []any{"<s>", 0}}
	for _, c := range []struct {
		name string
		post any
		want []uint32
	}{
		{"template", template, []uint32{1, 'h'}},
		{"sequence", seq, []uint32{1, 'h'}},
		{"roberta", roberta, []uint32{0, 'h'}},
	} {
		path := synthetic(t, nil, nil, map[string]any{"post_processor": c.post})
		tk, err := LoadWith(path, Options{AddBOS: true})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := encodeOK(t, tk, "h"); !slices.Equal(got, c.want) {
			t.Errorf("%s: h → %v, want %v", c.name, got, c.want)
		}
		// Without AddBOS nothing is added, whatever the post-processor says.
		tk, _ = Load(path)
		if got := encodeOK(t, tk, "h"); !slices.Equal(got, []uint32{'h'}) {
			t.Errorf("%s without AddBOS: h → %v", c.name, got)
		}
	}
	if _, err := LoadWith(synthetic(t, nil, nil, nil), Options{AddBOS: true}); err == nil || !strings.Contains(err.Error(), "no BOS") {
		t.Errorf("AddBOS without a BOS in the file: err = %v", err)
	}
}

func TestInvalidUTF8(t *testing.T) {
	tk, err := Load(synthetic(t, nil, nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Encode("ok\xff"); !errors.Is(err, ErrInvalidUTF8) {
		t.Errorf("Encode of invalid UTF-8: err = %v, want ErrInvalidUTF8", err)
	}
}
