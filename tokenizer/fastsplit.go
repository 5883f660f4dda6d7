package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// Hand-written matchers for the pre-tokenizer patterns nearly every byte-level model uses. They
// reproduce the backtracking regex's leftmost-first alternation exactly (a fuzz test holds them
// to regexp2) at a fraction of its cost: regexp2 was over a third of Encode's time. Other
// patterns still go through regexp2.
//
// Each matcher returns the end of the piece that starts at s[i:] (i < len(s)). These patterns
// match at every position, so pieces tile the text with no gaps.
type pieceEnd func(s string, i int) int

// qwen2Pattern is Llama3Pattern with single digits (Qwen2, Qwen2.5, Qwen3).
const qwen2Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2TiktokenPattern is tiktoken's spelling of the GPT-2 pattern (r50k_base, p50k_base).
const gpt2TiktokenPattern = `'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// fastSplitters maps pattern text to its matcher.
var fastSplitters = map[string]pieceEnd{
	Llama3Pattern:       func(s string, i int) int { return llama3End(s, i, 3) },
	qwen2Pattern:        func(s string, i int) int { return llama3End(s, i, 1) },
	gpt2Pattern:         gpt2End,
	gpt2TiktokenPattern: gpt2End,
}

func isL(r rune) bool { return unicode.IsLetter(r) }
func isN(r rune) bool { return unicode.IsNumber(r) }

// isS is the regex \s: Unicode White_Space, as in Oniguruma and regexp2.
func isS(r rune) bool { return unicode.IsSpace(r) }

// isPunct is [^\s\p{L}\p{N}]; false past the end of the text (r < 0).
func isPunct(r rune) bool { return r >= 0 && !isS(r) && !isL(r) && !isN(r) }

// runeAt decodes s[i:]; at the end it returns -1 and size 0, which no class contains.
func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// contractionEnd matches 's 't 're 've 'm 'll 'd at s[i:] (s[i] is the apostrophe), with ASCII
// case folding when fold is set, plus U+017F LONG S for s as Unicode case folding (Oniguruma,
// and Rust's regex in tiktoken) has it. regexp2 folds ASCII only; text with "'ſ" is the one
// place where its splits and these differ. Returns 0 when nothing matches.
func contractionEnd(s string, i int, fold bool) int {
	lower := func(j int) (rune, int) {
		r, n := runeAt(s, j)
		if fold {
			if 'A' <= r && r <= 'Z' {
				r += 'a' - 'A'
			} else if r == 'ſ' {
				r = 's'
			}
		}
		return r, n
	}
	j := i + 1
	r1, n1 := lower(j)
	switch r1 {
	case 's', 't', 'm', 'd':
		return j + n1
	case 'r', 'v', 'l':
		r2, n2 := lower(j + n1)
		if (r1 == 'r' && r2 == 'e') || (r1 == 'v' && r2 == 'e') || (r1 == 'l' && r2 == 'l') {
			return j + n1 + n2
		}
	}
	return 0
}

// spaceRunEnd returns the end of the whitespace run starting at i, and the end of its last
// \r or \n (0 if it has none).
func spaceRunEnd(s string, i int) (end, lastNewlineEnd int) {
	for end = i; end < len(s); {
		r, n := runeAt(s, end)
		if !isS(r) {
			break
		}
		end += n
		if r == '\r' || r == '\n' {
			lastNewlineEnd = end
		}
	}
	return end, lastNewlineEnd
}

// whitespaceEnd applies the shared tail `\s+(?!\S)|\s+` to the whitespace run starting at i:
// the run, less its last character when a non-space follows (that space then leads the next
// piece, " word").
func whitespaceEnd(s string, i, runEnd int) int {
	if runEnd == len(s) {
		return runEnd
	}
	_, lastSize := utf8.DecodeLastRuneInString(s[:runEnd])
	if runEnd-lastSize > i {
		return runEnd - lastSize
	}
	return runEnd
}

// llama3End matches (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,maxDigits}|
// ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
func llama3End(s string, i, maxDigits int) int {
	r, n := runeAt(s, i)
	if r == '\'' {
		if e := contractionEnd(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	letters := i
	if isL(r) {
		letters = i + n
	} else if r != '\r' && r != '\n' && !isN(r) {
		if r2, n2 := runeAt(s, i+n); isL(r2) {
			letters = i + n + n2
		}
	}
	if letters > i {
		for {
			r2, n2 := runeAt(s, letters)
			if !isL(r2) {
				return letters
			}
			letters += n2
		}
	}
	// \p{N}{1,maxDigits}
	if isN(r) {
		j := i + n
		for d := 1; d < maxDigits; d++ {
			r2, n2 := runeAt(s, j)
			if !isN(r2) {
				break
			}
			j += n2
		}
		return j
	}
	// ?[^\s\p{L}\p{N}]+[\r\n]*
	if start := punctStart(s, i, r, n); start > i || isPunct(r) {
		j := start
		for {
			r2, n2 := runeAt(s, j)
			if !isPunct(r2) {
				break
			}
			j += n2
		}
		for j < len(s) && (s[j] == '\r' || s[j] == '\n') {
			j++
		}
		return j
	}
	// Only whitespace is left: \s*[\r\n]+ up to the run's last newline, else the shared tail.
	runEnd, nl := spaceRunEnd(s, i)
	if nl > 0 {
		return nl
	}
	return whitespaceEnd(s, i, runEnd)
}

// punctStart handles the optional leading space of ` ?[^\s\p{L}\p{N}]+`: it returns i+1 when s[i]
// is a space followed by punctuation, else i.
func punctStart(s string, i int, r rune, n int) int {
	if r == ' ' {
		if r2, _ := runeAt(s, i+n); isPunct(r2) {
			return i + n
		}
	}
	return i
}

// gpt2End matches 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2End(s string, i int) int {
	r, n := runeAt(s, i)
	if r == '\'' {
		if e := contractionEnd(s, i, false); e > 0 {
			return e
		}
	}
	// The optional space, then one class run.
	start, first := i, r
	if r == ' ' {
		if r2, _ := runeAt(s, i+n); r2 >= 0 && !isS(r2) {
			start, first = i+n, r2
		}
	}
	var class func(rune) bool
	switch {
	case isL(first):
		class = isL
	case isN(first):
		class = isN
	case isPunct(first):
		class = isPunct
	}
	if class != nil {
		j := start
		for {
			r2, n2 := runeAt(s, j)
			if r2 < 0 || !class(r2) {
				return j
			}
			j += n2
		}
	}
	runEnd, _ := spaceRunEnd(s, i)
	return whitespaceEnd(s, i, runEnd)
}
