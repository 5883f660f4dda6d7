package tokenizer

import (
	"encoding/json"
	"os"
	"testing"
)

// idDecoder maps ids back to bytes; the package itself only encodes, tests need the inverse.
type idDecoder map[uint32]string

func (d idDecoder) decode(t testing.TB, ids []uint32) string {
	t.Helper()
	var b []byte
	for _, id := range ids {
		s, ok := d[id]
		if !ok {
			t.Fatalf("decode: unknown id %d", id)
		}
		b = append(b, s...)
	}
	return string(b)
}

// llamaDecoder builds the Llama-3 decoder from the tiktoken file and the built-in special tokens.
func llamaDecoder(t testing.TB) idDecoder {
	t.Helper()
	data, err := os.ReadFile(testData(t, llamaTiktokenBare))
	if err != nil {
		t.Fatal(err)
	}
	ranks, err := parseTiktokenRanks(data)
	if err != nil {
		t.Fatal(err)
	}
	d := make(idDecoder, len(ranks)+256)
	for tok, id := range ranks {
		d[id] = tok
	}
	for tok, id := range llama3SpecialTokens() {
		d[id] = tok
	}
	return d
}

func parseHFFileForTest(t testing.TB, data []byte) hfFile {
	t.Helper()
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	return f
}

// hfDecoder builds a decoder from a tokenizer.json: vocabulary through the byte-level alphabet,
// then added tokens as written.
func hfDecoder(t testing.TB, data []byte) idDecoder {
	t.Helper()
	f := parseHFFileForTest(t, data)
	var vocab map[string]uint32
	if err := json.Unmarshal(f.Model.Vocab, &vocab); err != nil {
		t.Fatal(err)
	}
	d := make(idDecoder, len(vocab))
	for text, id := range vocab {
		if b, ok := decodeByteLevel(text); ok {
			d[id] = string(b)
		}
	}
	for _, a := range f.AddedTokens {
		d[a.ID] = a.Content
	}
	return d
}
