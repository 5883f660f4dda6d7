package tokenizer

import (
	"sync"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer/tokenizertest"
)

// testData returns the path of a file under the tokenizer test data module (see package
// tokenizertest), skipping offline and failing under CI.
func testData(t testing.TB, name string) string {
	t.Helper()
	return tokenizertest.Path(t, name)
}

var (
	loadedMu sync.Mutex
	loaded   = map[string]Tokenizer{}
)

// loadData loads a test file once per test binary (the Llama-3 tokenizer.json takes ~0.5 s).
func loadData(t testing.TB, name string) Tokenizer {
	t.Helper()
	path := testData(t, name)
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if tk, ok := loaded[name]; ok {
		return tk
	}
	tk, err := Load(path)
	if err != nil {
		t.Fatalf("Load(%s): %v", name, err)
	}
	loaded[name] = tk
	return tk
}

const (
	llamaJSON     = "Meta-Llama-3-8B-Instruct.json"
	llamaTiktoken = "meta-llama-3-8b-instruct/tiktoken.model"
	// llamaTiktokenBare has no tokenizer_config.json beside it: special tokens come from the
	// built-in Llama-3 layout.
	llamaTiktokenBare = "Meta-Llama-3-8B-Instruct.model"
	kimiTiktoken      = "kimi-k2-instruct/tiktoken.model"
	cohereJSON        = "cohere-tokenizer.json"
)
