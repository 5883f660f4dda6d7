package tokenizer

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"unicode/utf8"
)

// prompt12K returns a 12 KB chat-templated prompt: a system message, then a user message holding
// Go source (code and English comments), the mix a coding assistant sends. The source is the
// toolchain's own net/http/server.go, read from GOROOT rather than committed.
func prompt12K(b *testing.B) string {
	b.Helper()
	src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "net", "http", "server.go"))
	if err != nil {
		b.Skipf("no GOROOT source for the benchmark prompt: %v", err)
	}
	head := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n" +
		"You are a senior Go reviewer. Point out bugs, races and API misuse; quote line numbers.<|eot_id|>" +
		"<|start_header_id|>user<|end_header_id|>\n\nReview this file:\n\n```go\n"
	tail := "\n```<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
	body := src[:12*1024-len(head)-len(tail)]
	for !utf8.Valid(body) {
		body = body[:len(body)-1]
	}
	return head + string(body) + tail
}

// BenchmarkEncode12K reports tokens/s for one goroutine, and for GOMAXPROCS goroutines in the
// parallel variant.
func BenchmarkEncode12K(b *testing.B) {
	prompt := prompt12K(b)
	for _, file := range []string{llamaJSON, llamaTiktoken} {
		tk := loadData(b, file)
		n := len(mustEncode(b, tk, prompt))
		b.Run(benchName(file)+"/serial", func(b *testing.B) {
			b.SetBytes(int64(len(prompt)))
			for b.Loop() {
				if _, err := tk.Encode(prompt); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(n), "tokens/op")
		})
		b.Run(benchName(file)+"/parallel", func(b *testing.B) {
			b.SetBytes(int64(len(prompt)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := tk.Encode(prompt); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkTiktokenGo is the same prompt through pkoukk/tiktoken-go, for comparison.
func BenchmarkTiktokenGo(b *testing.B) {
	prompt := prompt12K(b)
	ref := referenceTiktoken(b)
	n := len(ref(prompt))
	for b.Loop() {
		ref(prompt)
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

func benchName(file string) string {
	if filepath.Ext(file) == ".json" {
		return "tokenizer.json"
	}
	return "tiktoken"
}
