package prompt

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of request bodies (objects and arrays), so a hostile body cannot
// exhaust the stack; OpenAI bodies nest a handful of levels (tool JSON schemas a few more).
const maxJSONDepth = 128

// decodeJSON parses a JSON document into template values the way Python's json.loads does, which is
// what the engine's template sees: objects keep their key order (a repeated key keeps its first
// position and its last value), integers stay integers (int64; larger ones become floats), numbers
// with a fraction or exponent are floats. Text must be UTF-8 (the engine rejects anything else).
// It is a small hand-written parser: encoding/json's token API, the only ordered one, was the
// largest cost of resolving a long conversation.
func decodeJSON(data []byte) (jinja.Value, error) {
	p := jsonParser{data: data}
	v, err := p.value(0)
	if err != nil {
		return jinja.Value{}, err
	}
	p.space()
	if p.pos != len(p.data) {
		return jinja.Value{}, p.errorf("trailing data after the JSON value")
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	pos  int
}

func (p *jsonParser) errorf(format string, args ...any) error {
	return fmt.Errorf("offset %d: %s", p.pos, fmt.Sprintf(format, args...))
}

func (p *jsonParser) space() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *jsonParser) literal(word string, v jinja.Value) (jinja.Value, error) {
	if !bytes.HasPrefix(p.data[p.pos:], []byte(word)) {
		return jinja.Value{}, p.errorf("invalid character")
	}
	p.pos += len(word)
	return v, nil
}

func (p *jsonParser) value(depth int) (jinja.Value, error) {
	p.space()
	if p.pos >= len(p.data) {
		return jinja.Value{}, p.errorf("unexpected end of JSON")
	}
	switch c := p.data[p.pos]; {
	case c == '{' || c == '[':
		if depth >= maxJSONDepth {
			return jinja.Value{}, p.errorf("JSON nested deeper than %d levels", maxJSONDepth)
		}
		if c == '[' {
			return p.array(depth)
		}
		return p.object(depth)
	case c == '"':
		s, err := p.str()
		return jinja.NewString(s), err
	case c == 't':
		return p.literal("true", jinja.NewBool(true))
	case c == 'f':
		return p.literal("false", jinja.NewBool(false))
	case c == 'n':
		return p.literal("null", jinja.None())
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return jinja.Value{}, p.errorf("invalid character %q", p.data[p.pos])
}

func (p *jsonParser) array(depth int) (jinja.Value, error) {
	p.pos++ // '['
	items := []jinja.Value{}
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return jinja.NewList(items), nil
	}
	for {
		v, err := p.value(depth + 1)
		if err != nil {
			return jinja.Value{}, err
		}
		items = append(items, v)
		p.space()
		if p.pos >= len(p.data) {
			return jinja.Value{}, p.errorf("unexpected end of JSON")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case ']':
			p.pos++
			return jinja.NewList(items), nil
		default:
			return jinja.Value{}, p.errorf("expected ',' or ']'")
		}
	}
}

func (p *jsonParser) object(depth int) (jinja.Value, error) {
	p.pos++ // '{'
	obj := jinja.NewDict()
	d := obj.AsDict()
	p.space()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return jinja.Value{}, p.errorf("expected a string key")
		}
		key, err := p.str()
		if err != nil {
			return jinja.Value{}, err
		}
		p.space()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return jinja.Value{}, p.errorf("expected ':'")
		}
		p.pos++
		v, err := p.value(depth + 1)
		if err != nil {
			return jinja.Value{}, err
		}
		d.Set(key, v)
		p.space()
		if p.pos >= len(p.data) {
			return jinja.Value{}, p.errorf("unexpected end of JSON")
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
		case '}':
			p.pos++
			return obj, nil
		default:
			return jinja.Value{}, p.errorf("expected ',' or '}'")
		}
	}
}

// str reads a string literal at p.pos (the opening quote).
func (p *jsonParser) str() (string, error) {
	p.pos++
	start := p.pos
	// Fast path: no escapes.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			raw := p.data[start:p.pos]
			p.pos++
			if !utf8.Valid(raw) {
				return "", p.errorf("string is not valid UTF-8")
			}
			return string(raw), nil
		}
		if c == '\\' {
			break
		}
		if c < 0x20 {
			return "", p.errorf("control character in string")
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			if !utf8.Valid(buf) {
				return "", p.errorf("string is not valid UTF-8")
			}
			return string(buf), nil
		case c < 0x20:
			return "", p.errorf("control character in string")
		case c != '\\':
			buf = append(buf, c)
			p.pos++
			continue
		}
		if p.pos+1 >= len(p.data) {
			break
		}
		esc := p.data[p.pos+1]
		p.pos += 2
		switch esc {
		case '"', '\\', '/':
			buf = append(buf, esc)
		case 'b':
			buf = append(buf, '\b')
		case 'f':
			buf = append(buf, '\f')
		case 'n':
			buf = append(buf, '\n')
		case 'r':
			buf = append(buf, '\r')
		case 't':
			buf = append(buf, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.errorf("invalid \\u escape")
			}
			if utf16.IsSurrogate(r) {
				// A pair makes one character; a lone surrogate cannot be UTF-8 (U+FFFD, as Go's
				// encoding/json decodes it).
				r2 := unicode.ReplacementChar
				if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					if low, ok := p.hex4(); ok && utf16.DecodeRune(r, low) != unicode.ReplacementChar {
						r2 = utf16.DecodeRune(r, low)
					} else {
						p.pos = save
					}
				}
				r = r2
			}
			buf = utf8.AppendRune(buf, r)
		default:
			return "", p.errorf("invalid escape \\%c", esc)
		}
	}
	return "", p.errorf("unterminated string")
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// number reads a JSON number (RFC 8259 grammar).
func (p *jsonParser) number() (jinja.Value, error) {
	start := p.pos
	digits := func() int {
		n := 0
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	if p.data[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	if n := digits(); n == 0 || n > 1 && p.data[intStart] == '0' {
		return jinja.Value{}, p.errorf("invalid number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if digits() == 0 {
			return jinja.Value{}, p.errorf("invalid number")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if digits() == 0 {
			return jinja.Value{}, p.errorf("invalid number")
		}
	}
	return numberValue(string(p.data[start:p.pos]))
}

func numberValue(s string) (jinja.Value, error) {
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return jinja.NewInt(i), nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return jinja.Value{}, fmt.Errorf("number %s: %w", s, err)
	}
	return jinja.NewFloat(f), nil
}

// pyJSON writes v as Python's json.dumps(v, ensure_ascii=False, indent=indent,
// separators=separators) does — transformers' tojson filter, which chat templates use for tool
// schemas and tool-call arguments. indent < 0 means None (one line, ", " and ": " unless
// separators say otherwise); with an indent the item separator defaults to ",".
func pyJSON(b *strings.Builder, v jinja.Value, indent int, itemSep, keySep string, level int) error {
	switch {
	case v.IsNone() || v.IsUndefined():
		b.WriteString("null")
	case v.IsBool():
		if v.AsBool() {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case v.IsInt():
		b.WriteString(strconv.FormatInt(v.AsInt(), 10))
	case v.IsFloat():
		f := v.AsFloat()
		switch {
		case math.IsNaN(f):
			b.WriteString("NaN")
		case math.IsInf(f, 1):
			b.WriteString("Infinity")
		case math.IsInf(f, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(pyFloatRepr(f))
		}
	case v.IsString():
		pyJSONString(b, v.AsString())
	case v.IsList():
		items := v.AsList().Items
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, item := range items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(b, indent, level+1)
			if err := pyJSON(b, item, indent, itemSep, keySep, level+1); err != nil {
				return err
			}
		}
		newline(b, indent, level)
		b.WriteByte(']')
	case v.IsDict():
		d := v.AsDict()
		if d.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		b.WriteByte('{')
		for i, k := range d.Keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(b, indent, level+1)
			pyJSONString(b, k)
			b.WriteString(keySep)
			if err := pyJSON(b, d.Data[k], indent, itemSep, keySep, level+1); err != nil {
				return err
			}
		}
		newline(b, indent, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("tojson: a %s is not JSON serializable", v.String())
	}
	return nil
}

func newline(b *strings.Builder, indent, level int) {
	if indent < 0 {
		return
	}
	b.WriteByte('\n')
	for i := 0; i < indent*level; i++ {
		b.WriteByte(' ')
	}
}

// pyJSONString quotes s as json.dumps with ensure_ascii=False: only '"', '\\' and control
// characters below 0x20 are escaped (\n \r \t \b \f by name, others as \u00XX); everything else,
// U+2028 and DEL included, is written as is.
func pyJSONString(b *strings.Builder, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x80 {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b.WriteString("\ufffd") // cannot come from a JSON body, which Go decodes to valid UTF-8
			} else {
				b.WriteString(s[i : i+size])
			}
			i += size
			continue
		}
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 {
				b.WriteString(`\u00`)
				b.WriteByte(hex[c>>4])
				b.WriteByte(hex[c&0xf])
			} else {
				b.WriteByte(c)
			}
		}
		i++
	}
	b.WriteByte('"')
}

// pyFloatRepr formats f as Python's repr(float): the shortest digits that round-trip, in fixed
// notation when the decimal exponent is in [-4, 16) (always with a fractional part: "1.0"), else
// in scientific notation with at least two exponent digits ("1e-05", "1.5e+16").
func pyFloatRepr(f float64) string {
	e := strconv.FormatFloat(f, 'e', -1, 64) // "-d.ddde±XX"
	mant, expPart, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expPart)
	neg := strings.HasPrefix(mant, "-")
	digits := strings.Replace(strings.TrimPrefix(mant, "-"), ".", "", 1)
	var out string
	if decpt := exp + 1; decpt > -4 && decpt <= 16 {
		switch {
		case decpt <= 0:
			out = "0." + strings.Repeat("0", -decpt) + digits
		case decpt >= len(digits):
			out = digits + strings.Repeat("0", decpt-len(digits)) + ".0"
		default:
			out = digits[:decpt] + "." + digits[decpt:]
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		es := strconv.Itoa(exp)
		if len(es) < 2 {
			es = "0" + es
		}
		out += "e" + sign + es
	}
	if neg {
		out = "-" + out
	}
	return out
}
