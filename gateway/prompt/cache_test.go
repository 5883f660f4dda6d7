package prompt

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/statestore"
	"github.com/kvrouter/kvrouter/tokenizer/tokenizertest"
)

// convAtoms are the pieces random message contents are made of: words, whitespace runs,
// punctuation, numbers, unicode, and the text of special tokens (which the tokenizer splits out).
var convAtoms = []string{
	"the", " cat", " sat", " on", " mat", ".", ",", " ", "  ", "\n", "\n\n", "\t", " 12", "345", "3.14",
	"don't", " I'll", "héllo", " 日本語", " 😀", "👍🏽", "\u00a0", " <b>", "&amp;", "\"", "'", "\\",
	"<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|", "|>", "<|im_start|>", "[INST]", "</s>",
}

func randomContent(rng *rand.Rand) string {
	var b strings.Builder
	for n := rng.IntN(30); n >= 0; n-- {
		b.WriteString(convAtoms[rng.IntN(len(convAtoms))])
	}
	return b.String()
}

// randomConversation returns the messages of a conversation alternating user and assistant,
// with an optional system message first.
func randomConversation(rng *rand.Rand, turns int) []map[string]string {
	var msgs []map[string]string
	if rng.IntN(2) == 0 {
		msgs = append(msgs, map[string]string{"role": "system", "content": randomContent(rng)})
	}
	for i := 0; i < turns; i++ {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs = append(msgs, map[string]string{"role": role, "content": randomContent(rng)})
	}
	return msgs
}

func chatBody(t testing.TB, msgs []map[string]string) []byte {
	body, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// TestCachedEqualsUncached is the differential property test of the chat prefix cache: on random
// conversations replayed turn by turn (so later turns hit the cache), with templates that do and
// do not write the tokenizer's added tokens, and with a cache small enough to evict, the cached
// path returns exactly the tokens of encoding the full render without any cache.
func TestCachedEqualsUncached(t *testing.T) {
	llama := tokenizertest.Path(t, "Meta-Llama-3-8B-Instruct.json")
	pools := []statestore.PoolConfig{
		llamaPool(t),
		{Tokenizer: llama, ChatTemplate: "testdata/templates/qwen2.5-instruct.tokenizer_config.json"},
	}
	uncached := newTestResolver(t, Options{SegmentCacheTokens: -1})
	big := newTestResolver(t, Options{})
	tiny := newTestResolver(t, Options{SegmentCacheTokens: 200}) // evicts constantly
	rng := rand.New(rand.NewPCG(1, 2))
	checked, conversations := 0, 40
	if testing.Short() {
		conversations = 12
	}
	for conv := 0; conv < conversations; conv++ {
		cfg := pools[conv%len(pools)]
		msgs := randomConversation(rng, 1+rng.IntN(12))
		for k := 1; k <= len(msgs); k++ {
			if msgs[k-1]["role"] == "system" {
				continue // a conversation ends with a user or assistant turn
			}
			req := Request{Pool: "p", Config: cfg, Kind: Chat, Body: chatBody(t, msgs[:k])}
			want, err := uncached.Tokens(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range []*Resolver{big, tiny} {
				got, err := r.Tokens(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got.Tokens, want.Tokens) {
					t.Fatalf("conversation %d, %d messages: cached tokens differ\n got %v\nwant %v", conv, k, got.Tokens, want.Tokens)
				}
			}
			checked++
		}
	}
	seg, _ := big.Stats()
	if seg.Hits == 0 || seg.Misses == 0 {
		t.Errorf("segment cache stats %+v: expected hits and misses", seg)
	}
	tinySeg, _ := tiny.Stats()
	if tinySeg.Cost > tinySeg.Capacity {
		t.Errorf("tiny cache over capacity: %+v", tinySeg)
	}
	t.Logf("%d conversation prefixes identical with and without the cache; segment cache %+v", checked, seg)
}

// benchConversation is a coding-assistant chat: a 1 KB system prompt, user turns of ~400 bytes and
// assistant turns of ~900 bytes, each a different stretch of Go source and comments (the
// toolchain's net/http/server.go, read from GOROOT rather than committed).
func benchConversation(b *testing.B, turns int) []map[string]string {
	src, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "src", "net", "http", "server.go"))
	if err != nil {
		b.Skipf("no GOROOT source for the benchmark conversation: %v", err)
	}
	off := 0
	text := func(n int) string {
		chunk := src[off : off+n]
		off += n
		for !utf8.Valid(chunk) {
			chunk = chunk[:len(chunk)-1]
		}
		return string(chunk)
	}
	msgs := []map[string]string{{"role": "system", "content": text(1000)}}
	for i := 0; i < turns; i++ {
		if i%2 == 0 {
			msgs = append(msgs, map[string]string{"role": "user", "content": text(400)})
		} else {
			msgs = append(msgs, map[string]string{"role": "assistant", "content": text(900)})
		}
	}
	return msgs
}

// BenchmarkChatTurn measures resolving turn N of an N-turn conversation (Llama-3 template and
// tokenizer.json) whose earlier turns were seen: each iteration's last user message is new, so
// with the cache only it is encoded; without, the whole history is.
func BenchmarkChatTurn(b *testing.B) {
	for _, turns := range []int{6, 12, 20} {
		for _, cache := range []bool{false, true} {
			b.Run(fmt.Sprintf("turns=%d/cache=%v", turns, cache), func(b *testing.B) {
				opts := Options{SegmentCacheTokens: -1}
				if cache {
					opts = Options{}
				}
				r := newTestResolver(b, opts)
				cfg := llamaPool(b)
				msgs := benchConversation(b, turns)
				last := msgs[len(msgs)-1]["content"] // turn N is a user turn of ~400 bytes
				msgs = msgs[:len(msgs)-1]
				body := func(i int) []byte {
					return chatBody(b, append(slices.Clone(msgs), map[string]string{"role": "user", "content": fmt.Sprintf("%s (%d)", last, i)}))
				}
				// Warm: load the tokenizer and template, and (with the cache) see the history once.
				if _, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Chat, Body: body(-1)}); err != nil {
					b.Fatal(err)
				}
				// Each iteration has a new last message, as each real turn has; bodies are built
				// outside the measured spans, in batches.
				const batch = 512
				bodies := make([][]byte, 0, batch)
				var cpu time.Duration // process CPU time (user+system) of the measured spans
				b.ReportAllocs()
				b.ResetTimer()
				cpuStart := processCPU(b)
				for i := 0; i < b.N; i++ {
					if i%batch == 0 {
						cpu += processCPU(b) - cpuStart
						b.StopTimer()
						bodies = bodies[:0]
						for j := i; j < i+batch && j < b.N; j++ {
							bodies = append(bodies, body(j))
						}
						runtime.GC() // the garbage of building bodies is not the resolver's
						b.StartTimer()
						cpuStart = processCPU(b)
					}
					req := Request{Config: cfg, Kind: Chat, Body: bodies[i%batch]}
					if _, err := r.Tokens(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
				cpu += processCPU(b) - cpuStart
				// CPU time per op is steadier than wall time on a shared, overloaded box.
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// TestConcurrentTokens resolves the same conversations from several goroutines on a fresh
// resolver (first loads race, caches are shared; run with -race) and checks every answer against
// the uncached one.
func TestConcurrentTokens(t *testing.T) {
	cfg := llamaPool(t)
	rng := rand.New(rand.NewPCG(9, 9))
	var bodies [][]byte
	for i := 0; i < 8; i++ {
		bodies = append(bodies, chatBody(t, randomConversation(rng, 1+2*rng.IntN(4))))
	}
	ref := newTestResolver(t, Options{SegmentCacheTokens: -1})
	want := make([][]uint32, len(bodies))
	for i, b := range bodies {
		res, err := ref.Tokens(context.Background(), Request{Config: cfg, Kind: Chat, Body: b})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = res.Tokens
	}
	r := newTestResolver(t, Options{SegmentCacheTokens: 2000})
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		go func(g int) {
			for i := 0; i < 40; i++ {
				k := (g + i) % len(bodies)
				res, err := r.Tokens(context.Background(), Request{Config: cfg, Kind: Chat, Body: bodies[k]})
				if err == nil && !slices.Equal(res.Tokens, want[k]) {
					err = fmt.Errorf("goroutine %d body %d: tokens differ", g, k)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}(g)
	}
	for g := 0; g < 4; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// processCPU is the process's user+system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
