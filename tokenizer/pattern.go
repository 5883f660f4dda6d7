package tokenizer

import (
	"fmt"
	"strings"

	"github.com/dlclark/regexp2"
)

// Llama3Pattern is the pre-tokenizer regex of Llama-3 (and of OpenAI's cl100k_base). Its
// `\s+(?!\S)` lookahead is why the package uses regexp2: Go's regexp has no lookahead. It splits
// numbers into groups of up to three digits.
const Llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

// gpt2Pattern is the regex of Hugging Face's ByteLevel pre-tokenizer when use_regex is true.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// compilePattern compiles a Hugging Face (Oniguruma) or tiktoken (fancy-regex) pattern with
// regexp2, whose default .NET syntax agrees with them on everything these patterns use (\p{..}
// classes, Unicode \s, (?i:..), lookahead) except class intersection, translated below.
func compilePattern(p string) (*regexp2.Regexp, error) {
	tp, err := translateIntersections(p)
	if err != nil {
		return nil, err
	}
	re, err := regexp2.Compile(tp, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile pattern %q: %w", p, err)
	}
	return re, nil
}

// translateIntersections rewrites Oniguruma's class intersection with a negated class,
// `[X&&[^Y]]`, into .NET's class subtraction `[X-[Y]]` (Kimi-K2's and similar patterns use it).
// regexp2 would otherwise read "&&" as two literal ampersands and silently split differently, so
// any other use of "&&" inside a class is an error.
func translateIntersections(p string) (string, error) {
	if !strings.Contains(p, "&&") {
		return p, nil
	}
	var b strings.Builder
	inClass := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\\' && i+1 < len(p):
			b.WriteByte(c)
			b.WriteByte(p[i+1])
			i++
		case !inClass && c == '[':
			inClass = true
			b.WriteByte(c)
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' { // a leading ']' is literal
				b.WriteByte(']')
				i++
			}
		case inClass && c == ']':
			inClass = false
			b.WriteByte(c)
		case inClass && strings.HasPrefix(p[i:], "&&[^"):
			// Find the end of the nested negated class; the outer class must close right after it.
			j := i + len("&&[^")
			for j < len(p) && p[j] != ']' {
				if p[j] == '\\' {
					j++
				} else if p[j] == '[' {
					return "", fmt.Errorf("pattern %q: nested class inside an intersection is not supported", p)
				}
				j++
			}
			if j+1 >= len(p) || p[j+1] != ']' {
				return "", fmt.Errorf("pattern %q: class intersection must end its class", p)
			}
			b.WriteString("-[")
			b.WriteString(p[i+len("&&[^") : j])
			b.WriteString("]]")
			i = j + 1
			inClass = false
		case inClass && strings.HasPrefix(p[i:], "&&"):
			return "", fmt.Errorf("pattern %q: class intersection other than &&[^...] is not supported", p)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
