package tokenizer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRejectsOtherTokenizers: anything but byte-level BPE fails at Load with an error naming what
// was found, since approximate ids would silently break every block hash.
func TestRejectsOtherTokenizers(t *testing.T) {
	write := func(name, content string) string {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cases := []struct {
		name, path, want string
	}{
		{"unigram", write("tokenizer.json", `{"model":{"type":"Unigram","unk_id":0,"vocab":[["<unk>",0.0],["a",-1.5]]}}`), `"Unigram"`},
		{"unigram without type", write("tokenizer.json", `{"model":{"unk_id":0,"vocab":[["<unk>",0.0]]}}`), `"Unigram"`},
		{"wordlevel", write("tokenizer.json", `{"model":{"type":"WordLevel","vocab":{"a":0},"unk_token":"a"}}`), `"WordLevel"`},
		{"sentencepiece-style BPE", write("tokenizer.json", `{"pre_tokenizer":{"type":"Metaspace","replacement":"▁","prepend_scheme":"first","split":false},
			"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":[]}}`), "pre-tokenizer \"Metaspace\""},
		{"BPE without pre-tokenizer", write("tokenizer.json", `{"pre_tokenizer":null,"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "SentencePiece-style"},
		{"dropout", write("tokenizer.json", `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","dropout":0.1,"vocab":{"a":0},"merges":[]}}`), "dropout"},
		{"lowercase normalizer", write("tokenizer.json", `{"normalizer":{"type":"Lowercase"},"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), `normalizer "Lowercase"`},
		{"missing bytes", write("tokenizer.json", `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{"a":0},"merges":[]}}`), "lacks byte"},
		{"sentencepiece protobuf", write("tokenizer.model", "\n\x0e\n\x05<unk>\x15\x00\x00\x00\x00\x18\x02\n\x0b\n\x03<s>"), "not a tiktoken BPE file"},
		{"bad tiktoken rank", write("tokenizer.model", "IQ== zero\n"), "rank"},
		{"empty", write("tokenizer.model", ""), "empty"},
	}
	for _, c := range cases {
		_, err := Load(c.path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "tokenizer: load ") {
			t.Errorf("%s: err = %v, want one mentioning %s", c.name, err, c.want)
		}
	}
	// Real WordPiece files (BERT's has no "type": it is inferred as Hugging Face does).
	for _, file := range []string{"bert-base-uncased.json", "all-minilm-l6-v2.json"} {
		_, err := Load(testData(t, file))
		if err == nil || !strings.Contains(err.Error(), `"WordPiece"`) {
			t.Errorf("%s: err = %v, want WordPiece named", file, err)
		}
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	// tiktoken-only options on a tokenizer.json.
	if _, err := LoadWith(testData(t, cohereJSON), Options{Pattern: `\w+`}); err == nil {
		t.Error("Options.Pattern accepted for a tokenizer.json")
	}
}

func TestTranslateIntersections(t *testing.T) {
	cases := []struct{ in, out string }{
		{`\p{L}+`, `\p{L}+`},
		{`[\p{Lu}\p{Lo}&&[^\p{Han}]]*x`, `[\p{Lu}\p{Lo}-[\p{Han}]]*x`},
		{`[^\r\n]?[a-z&&[^aeiou]]+|\s+`, `[^\r\n]?[a-z-[aeiou]]+|\s+`},
		{`a\[&&b`, `a\[&&b`}, // escaped bracket: not a class
	}
	for _, c := range cases {
		got, err := translateIntersections(c.in)
		if err != nil || got != c.out {
			t.Errorf("translateIntersections(%q) = %q, %v; want %q", c.in, got, err, c.out)
		}
	}
	for _, bad := range []string{`[a-z&&b]`, `[a-z&&[^b]c]`} {
		if _, err := translateIntersections(bad); err == nil {
			t.Errorf("translateIntersections(%q) accepted an unsupported intersection", bad)
		}
	}
}

// TestLoadDirectory: a model directory resolves to its tokenizer.json, else its tiktoken.model.
func TestLoadDirectory(t *testing.T) {
	llamaDir := filepath.Dir(testData(t, llamaTiktoken)) // has tiktoken.model, no tokenizer.json
	tk, err := Load(llamaDir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tk.Name(), "tiktoken.model@") {
		t.Errorf("Name() = %q", tk.Name())
	}
	if _, err := Load(t.TempDir()); err == nil || !strings.Contains(err.Error(), "tokenizer.json") {
		t.Errorf("empty directory: err = %v", err)
	}
}
