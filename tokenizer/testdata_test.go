package tokenizer

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// The real tokenizer files come from the Go module github.com/daulet/tokenizers, whose test/data
// ships Meta-Llama-3-8B-Instruct's tokenizer.json and tiktoken.model (and Kimi-K2's, Cohere's,
// BERT's). They are read from the module cache, never copied here: Meta's licence covers them.
// The module is downloaded into the cache from a throwaway module, so go.mod and go.sum stay as
// they are.
const dataModule = "github.com/daulet/tokenizers@v1.24.0"

var (
	dataOnce sync.Once
	dataDir  string
	dataErr  string
)

// testData returns the path of a file under the module's test/data, skipping the test when the
// module cannot be had (offline) — except in CI, which reaches the Go module proxy and must not
// pass by skipping every tokenizer check.
func testData(t testing.TB, name string) string {
	t.Helper()
	dataOnce.Do(func() { dataDir, dataErr = findDataDir() })
	if dataErr != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("tokenizer test data unavailable in CI: %s", dataErr)
		}
		t.Skipf("tokenizer test data unavailable (offline?): %s", dataErr)
	}
	return filepath.Join(dataDir, name)
}

func findDataDir() (dir, problem string) {
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		d := filepath.Join(strings.TrimSpace(string(out)), "github.com", "daulet", "tokenizers@v1.24.0", "test", "data")
		if _, err := os.Stat(filepath.Join(d, "Meta-Llama-3-8B-Instruct.json")); err == nil {
			return d, ""
		}
	}
	tmp, err := os.MkdirTemp("", "tokenizer-testdata-")
	if err != nil {
		return "", err.Error()
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module tokenizertestdata\n\ngo 1.26\n"), 0o644); err != nil {
		return "", err.Error()
	}
	cmd := exec.Command("go", "mod", "download", "-json", dataModule)
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		return "", "go mod download " + dataModule + ": " + err.Error() + ": " + string(out)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil || info.Dir == "" {
		return "", "go mod download " + dataModule + ": no directory: " + string(out)
	}
	return filepath.Join(info.Dir, "test", "data"), ""
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
