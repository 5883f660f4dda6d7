package tokenizer

import (
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	tiktoken "github.com/pkoukk/tiktoken-go"
)

// mixedText exercises every branch of the Llama-3 pattern and of byte-level BPE: prose,
// contractions in both cases, code, digit runs (split in threes), accented and decomposed text,
// CJK, Arabic, Devanagari, emoji with modifiers and joiners, Unicode spaces, whitespace runs,
// newlines and carriage returns, and special tokens, whole and broken.
const mixedText = `<|begin_of_text|><|start_header_id|>system<|end_header_id|>

You're a careful assistant. DON'T guess; it's better to say "I'LL check" than to be wrong. We'd, they've, I'm.
<|eot_id|><|start_header_id|>user<|end_header_id|>

Here is the code:

` + "```go" + `
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", 405) // TODO(bob): 405 → 404?
		return
	}
	for i := 0; i < 1_000_000; i += 3 { x[i&0xff] ^= 0b1011 }
}
` + "```" + `

Numbers: 1 12 123 1234 12345 123456 1234567 3.14159 -42 1e-9 2024-07-26 0x7fffffff ٣٤٥ ４５６.
Accents: café, naïve, résumé, Ångström, São Paulo, Müller, Łódź, crème brûlée; decomposed: cafe` + "\u0301" + ` e` + "\u0308" + `.
CJK: 你好，世界！日本語のテキストです。한국어 문장입니다.
Arabic: مرحبا بالعالم. Hindi: नमस्ते दुनिया। Russian: Привет, мир! Greek: Γειά σου Κόσμε.
Emoji: 👋🏽 👨‍👩‍👧‍👦 🇫🇷 ❤️ 🚀🚀🚀 ☕.
Spaces:` + "\u00a0" + `nbsp,` + "\u3000" + `ideographic,` + "\u2003" + `em, tab	here,		two tabs,    four spaces   
trailing spaces then newline` + "\r\n" + `CRLF line` + "\r" + `CR only


three newlines above; ` + "\u200b" + `zero-width space; ` + "\ufeff" + `BOM.
Broken specials: <|eot_id <|begin_of_text|  <|unknown|> <|reserved_special_token_250|><|reserved_special_token_25|>
<|eot_id|><|start_header_id|>assistant<|end_header_id|>

`

// referenceTiktoken is pkoukk/tiktoken-go over the same tiktoken file: an independent BPE (its
// own merge loop over ranks and its own special-token handling) that the field notes found
// identical to Hugging Face's reference on a 12 KB prompt.
func referenceTiktoken(t testing.TB) func(string) []uint32 {
	t.Helper()
	data, err := os.ReadFile(testData(t, llamaTiktokenBare))
	if err != nil {
		t.Fatal(err)
	}
	ranks, err := parseTiktokenRanks(data)
	if err != nil {
		t.Fatal(err)
	}
	enc := make(map[string]int, len(ranks))
	for k, v := range ranks {
		enc[k] = int(v)
	}
	specials := map[string]int{}
	set := map[string]any{}
	for k, v := range llama3SpecialTokens() {
		specials[k] = int(v)
		set[k] = true
	}
	core, err := tiktoken.NewCoreBPE(enc, specials, Llama3Pattern)
	if err != nil {
		t.Fatal(err)
	}
	tk := tiktoken.NewTiktoken(core, nil, set)
	return func(s string) []uint32 {
		ids := tk.Encode(s, []string{"all"}, nil)
		out := make([]uint32, len(ids))
		for i, id := range ids {
			out[i] = uint32(id)
		}
		return out
	}
}

// TestLoadersAgree: tokenizer.json (Hugging Face merge ranks), the tiktoken file (token ranks)
// and tiktoken-go must give identical ids on mixed text, a 92 KB text, and random texts.
func TestLoadersAgree(t *testing.T) {
	hf := loadData(t, llamaJSON)
	tt := loadData(t, llamaTiktoken)
	ref := referenceTiktoken(t)
	long, err := os.ReadFile(testData(t, "long_text.txt"))
	if err != nil {
		t.Fatal(err)
	}
	check := func(name, text string) {
		t.Helper()
		a, err := hf.Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		b, err := tt.Encode(text)
		if err != nil {
			t.Fatal(err)
		}
		c := ref(text)
		if !slices.Equal(a, b) || !slices.Equal(a, c) {
			i := 0
			for i < len(a) && i < len(b) && i < len(c) && a[i] == b[i] && a[i] == c[i] {
				i++
			}
			t.Fatalf("%s: encodings differ from token %d (of %d/%d/%d)\n tokenizer.json %v\n tiktoken file  %v\n tiktoken-go    %v\ntext %q",
				name, i, len(a), len(b), len(c), a[i:min(i+8, len(a))], b[i:min(i+8, len(b))], c[i:min(i+8, len(c))], text)
		}
	}
	// Llama-3's tokenizer.json pattern must hit the hand-written matcher, not regexp2.
	if sp := hf.(*bpeTokenizer).steps[0].(splitStep).sp; sp.fast == nil {
		t.Error("Llama-3 tokenizer.json split pattern is not on the fast path")
	}
	check("mixed", mixedText)
	check("long_text.txt", string(long))

	// The digit rule: runs of digits split into groups of three from the left.
	ids, _ := hf.Encode("1234567")
	want, _ := hf.Encode("123")
	want = append(want, mustEncode(t, hf, "456")...)
	want = append(want, mustEncode(t, hf, "7")...)
	if !slices.Equal(ids, want) {
		t.Errorf("1234567 → %v, want groups of three %v", ids, want)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	n := 3000
	if testing.Short() {
		n = 300
	}
	for i := 0; i < n; i++ {
		check("random", randomText(rng, 1+rng.IntN(40)))
	}
}

func mustEncode(t testing.TB, tk Tokenizer, s string) []uint32 {
	t.Helper()
	ids, err := tk.Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// randomAtoms are glued at random: the interesting cases are at their boundaries (a space
// before a digit, a newline after spaces, a mark after a special token, ...).
var randomAtoms = []string{
	"a", "Z", "the", " the", "The", "ing", "'s", "'S", "'ll", "'LL", "'d", "'", "\"", "don't",
	"0", "7", "42", "123", "2024", "٣", "４",
	" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
	".", ",", "!", "?", "...", "->", "::", "{", "}", "(", ")", "==", "!=", "#", "@", "$", "%", "_", "__",
	"é", "e\u0301", "ß", "İ", "ﬁ", "Ω", "ж", "日本", "你好", "한", "ก", "\u0915\u094d", "ا", "ة",
	"😀", "👍🏽", "👨\u200d💻", "🇯🇵", "\u200d", "\ufe0f", "\ufffd", "\u00ad", "\x7f", "\x00", "\x1b[0m",
	"<|eot_id|>", "<|begin_of_text|>", "<|start_header_id|>", "<|", "|>", "<|eot_id", "<|reserved_special_token_9|>",
}

func randomText(rng *rand.Rand, atoms int) string {
	var b strings.Builder
	for i := 0; i < atoms; i++ {
		b.WriteString(randomAtoms[rng.IntN(len(randomAtoms))])
	}
	return b.String()
}

// TestEncodeConcurrent runs Encode from several goroutines (run with -race) and checks each
// result against a sequential encoding.
func TestEncodeConcurrent(t *testing.T) {
	for _, file := range []string{llamaJSON, llamaTiktoken} {
		tk := loadData(t, file)
		rng := rand.New(rand.NewPCG(3, 4))
		texts := make([]string, 64)
		want := make([][]uint32, len(texts))
		for i := range texts {
			texts[i] = randomText(rng, 1+rng.IntN(200))
			want[i] = mustEncode(t, tk, texts[i])
		}
		var wg sync.WaitGroup
		errs := make(chan string, 8*len(texts))
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 4; r++ {
					for i := range texts {
						j := (i + g*7) % len(texts)
						got, err := tk.Encode(texts[j])
						if err != nil || !slices.Equal(got, want[j]) {
							errs <- texts[j]
						}
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for text := range errs {
			t.Errorf("%s: concurrent Encode(%q) differs from sequential", file, text)
		}
	}
}
