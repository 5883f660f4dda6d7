package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dlclark/regexp2"
)

// splitAlphabet mixes every class the patterns distinguish: ASCII letters of both cases (for
// contractions), Unicode letters and numbers, each kind of whitespace and newline, punctuation,
// marks, emoji, control characters.
var splitAlphabet = []string{
	"a", "Z", "s", "S", "t", "r", "R", "e", "E", "v", "m", "l", "L", "d", "D", "x",
	"'", "'", "'", "0", "9", "٣", "４", "Ⅷ", "½", "²",
	" ", " ", " ", "\t", "\n", "\r", "\v", "\f", "\u0085", "\u00a0", "\u2028", "\u2029", "\u3000", "\u200b",
	".", ",", "!", "(", "\"", "-", "_", "#", "€", "😀", "\u0301", "\u094d", "\u200d", "\x00", "\x7f",
	"é", "ж", "日", "한", "ا", "क", "ß",
}

func randomSplitText(rng *rand.Rand) string {
	var b strings.Builder
	for n := rng.IntN(24); n >= 0; n-- {
		b.WriteString(splitAlphabet[rng.IntN(len(splitAlphabet))])
	}
	return b.String()
}

var compiledForTest sync.Map // pattern → *regexp2.Regexp

// checkFastSplit compares the hand-written matcher of pattern with regexp2 on s.
func checkFastSplit(t *testing.T, pattern, s string) {
	t.Helper()
	v, ok := compiledForTest.Load(pattern)
	if !ok {
		re, err := compilePattern(pattern)
		if err != nil {
			t.Fatal(err)
		}
		v, _ = compiledForTest.LoadOrStore(pattern, re)
	}
	want, err := splitIsolated(v.(*regexp2.Regexp), s, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := (&splitter{fast: fastSplitters[pattern]}).split(s, nil)
	if !slices.Equal(got, want) {
		t.Fatalf("pattern %.30q on %q:\n fast    %q\n regexp2 %q", pattern, s, got, want)
	}
}

func TestFastSplittersMatchRegexp2(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	n := 20000
	if testing.Short() {
		n = 2000
	}
	for pattern := range fastSplitters {
		for _, s := range []string{"", mixedText, "x  \n  y", "'s'S'LL're'Ve 'd", "a\r\n\r\n  \tb", "   ", "1234567 ٣٤٥٦"} {
			checkFastSplit(t, pattern, s)
		}
		for i := 0; i < n; i++ {
			checkFastSplit(t, pattern, randomSplitText(rng))
		}
	}
}

// The one intended difference: "'ſ" is a contraction under Unicode case folding (Hugging Face's
// Oniguruma), not under regexp2's ASCII folding.
func TestLongSContraction(t *testing.T) {
	got, _ := (&splitter{fast: fastSplitters[Llama3Pattern]}).split("it'ſ", nil)
	if want := []string{"it", "'ſ"}; !slices.Equal(got, want) {
		t.Errorf("split(it'ſ) = %q, want %q", got, want)
	}
}

func FuzzFastSplitters(f *testing.F) {
	for _, s := range []string{"Hello world", "x  \n  y", "'s'LL", "1234", "a\tb", mixedText} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !isValidForSplitFuzz(s) {
			t.Skip()
		}
		for pattern := range fastSplitters {
			checkFastSplit(t, pattern, s)
		}
	})
}

// isValidForSplitFuzz keeps UTF-8 text (as Encode requires) without the long-s contraction.
func isValidForSplitFuzz(s string) bool {
	return strings.ToValidUTF8(s, "") == s && !strings.Contains(s, "'ſ")
}
