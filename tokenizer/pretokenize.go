package tokenizer

import (
	"unicode/utf8"

	"github.com/dlclark/regexp2"
)

// preStep is one pre-tokenizer of the pipeline: it replaces each piece by the pieces it splits into.
// Pieces are substrings of the (normalised) text, so splitting allocates only the piece list.
type preStep interface {
	apply(pieces, out []string) ([]string, error)
}

// splitStep is Hugging Face's Split pre-tokenizer with behavior "Isolated": every match and every
// gap between matches becomes its own piece.
type splitStep struct{ sp *splitter }

func (s splitStep) apply(pieces, out []string) ([]string, error) {
	for _, p := range pieces {
		var err error
		if out, err = s.sp.split(p, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// byteLevelStep is Hugging Face's ByteLevel pre-tokenizer. The byte→rune mapping it also does is
// implicit here: the BPE model works on raw bytes.
type byteLevelStep struct {
	addPrefixSpace bool
	sp             *splitter // the GPT-2 regex when use_regex is true, else nil
}

func (s byteLevelStep) apply(pieces, out []string) ([]string, error) {
	for _, p := range pieces {
		if s.addPrefixSpace && (p == "" || p[0] != ' ') {
			p = " " + p
		}
		if s.sp == nil {
			out = append(out, p)
			continue
		}
		var err error
		if out, err = s.sp.split(p, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// splitter is a compiled pre-tokenizer pattern: a hand-written matcher when the pattern is a
// known one, else regexp2.
type splitter struct {
	re   *regexp2.Regexp
	fast pieceEnd
}

func newSplitter(pattern string) (*splitter, error) {
	re, err := compilePattern(pattern)
	if err != nil {
		return nil, err
	}
	return &splitter{re: re, fast: fastSplitters[pattern]}, nil
}

// split appends the pieces of s to out ("Isolated": matches and the gaps between them).
func (sp *splitter) split(s string, out []string) ([]string, error) {
	if sp.fast == nil {
		return splitIsolated(sp.re, s, out)
	}
	for i := 0; i < len(s); {
		j := sp.fast(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out, nil
}

// splitIsolated appends to out the matches of re in s and the gaps between them, dropping empty
// pieces as Hugging Face does. regexp2 reports positions in runes; they are walked forward to
// byte offsets once, in order.
func splitIsolated(re *regexp2.Regexp, s string, out []string) ([]string, error) {
	m, err := re.FindStringMatch(s)
	if err != nil {
		return nil, err
	}
	bytePos, runePos := 0, 0
	toByte := func(r int) int {
		for runePos < r {
			_, size := utf8.DecodeRuneInString(s[bytePos:])
			bytePos += size
			runePos++
		}
		return bytePos
	}
	last := 0
	for m != nil {
		start := toByte(m.Index)
		end := toByte(m.Index + m.Length)
		if start > last {
			out = append(out, s[last:start])
		}
		if end > start {
			out = append(out, s[start:end])
		}
		last = end
		if m, err = re.FindNextMatch(m); err != nil {
			return nil, err
		}
	}
	if last < len(s) {
		out = append(out, s[last:])
	}
	return out, nil
}
