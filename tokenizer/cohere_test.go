package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"testing"

	"golang.org/x/text/unicode/norm"
)

// naiveBPE is the textbook Hugging Face BPE, written independently of bpeModel: repeatedly merge
// the adjacent pair with the lowest merge rank (leftmost on ties) until none applies.
type naiveBPE struct {
	rank  map[[2]string]int
	vocab map[string]uint32 // byte-level text → id
}

func newNaiveBPE(t *testing.T, data []byte) *naiveBPE {
	t.Helper()
	f := parseHFFileForTest(t, data)
	n := &naiveBPE{rank: map[[2]string]int{}}
	if err := json.Unmarshal(f.Model.Vocab, &n.vocab); err != nil {
		t.Fatal(err)
	}
	merges, err := parseMerges(f.Model.Merges)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range merges {
		n.rank[m] = i
	}
	return n
}

func (n *naiveBPE) encode(piece string) []uint32 {
	var syms []string
	for _, r := range byteLevelText(piece) {
		syms = append(syms, string(r))
	}
	for {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := n.rank[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		syms = slices.Replace(syms, at, at+2, syms[at]+syms[at+1])
	}
	ids := make([]uint32, len(syms))
	for i, s := range syms {
		ids[i] = n.vocab[s]
	}
	return ids
}

// TestCohereGPT2Style covers the other tokenizer.json shape: NFC normalizer, ByteLevel
// pre-tokenizer with GPT-2's regex and no Split. Ids must decode back to the NFC text and match
// the naive BPE over the same pre-tokenisation.
func TestCohereGPT2Style(t *testing.T) {
	data, err := os.ReadFile(testData(t, cohereJSON))
	if err != nil {
		t.Fatal(err)
	}
	tk := loadData(t, cohereJSON)
	dec := hfDecoder(t, data)
	naive := newNaiveBPE(t, data)
	re, err := compilePattern(gpt2Pattern)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	texts := []string{mixedText, "Hello world", "caf" + "e\u0301 au lait"}
	for i := 0; i < 300; i++ {
		texts = append(texts, randomText(rng, 1+rng.IntN(30)))
	}
	for _, text := range texts {
		got := encodeOK(t, tk, text)
		nfc := norm.NFC.String(text)
		if back := dec.decode(t, got); back != nfc {
			t.Fatalf("decode(encode(%q)) = %q", text, back)
		}
		// Cohere's added tokens are <PAD>, <BOS_TOKEN>, ... absent from randomText's atoms.
		pieces, err := splitIsolated(re, nfc, nil)
		if err != nil {
			t.Fatal(err)
		}
		var want []uint32
		for _, p := range pieces {
			want = append(want, naive.encode(p)...)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("Encode(%q)\n got %v\nwant %v (naive BPE)", text, got, want)
		}
	}
}
