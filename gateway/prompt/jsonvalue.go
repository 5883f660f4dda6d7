package prompt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// maxJSONDepth bounds the nesting of request bodies (objects and arrays), so a hostile body cannot
// exhaust the stack; OpenAI bodies nest a handful of levels (tool JSON schemas a few more).
const maxJSONDepth = 128

// decodeJSON parses a JSON document into template values the way Python's json.loads does, which is
// what the engine's template sees: objects keep their key order (a repeated key keeps its first
// position and its last value), integers stay integers (int64; larger ones become floats), numbers
// with a fraction or exponent are floats.
func decodeJSON(data []byte) (jinja.Value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return jinja.Value{}, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return jinja.Value{}, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (jinja.Value, error) {
	tok, err := dec.Token()
	if err != nil {
		return jinja.Value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return jinja.None(), nil
	case bool:
		return jinja.NewBool(t), nil
	case string:
		return jinja.NewString(t), nil
	case json.Number:
		return numberValue(t)
	case json.Delim:
		if depth >= maxJSONDepth {
			return jinja.Value{}, fmt.Errorf("JSON nested deeper than %d levels", maxJSONDepth)
		}
		if t == '[' {
			items := []jinja.Value{}
			for dec.More() {
				item, err := decodeValue(dec, depth+1)
				if err != nil {
					return jinja.Value{}, err
				}
				items = append(items, item)
			}
			_, err := dec.Token() // ']'
			return jinja.NewList(items), err
		}
		obj := jinja.NewDict()
		d := obj.AsDict()
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return jinja.Value{}, err
			}
			key, _ := kt.(string)
			val, err := decodeValue(dec, depth+1)
			if err != nil {
				return jinja.Value{}, err
			}
			d.Set(key, val)
		}
		_, err := dec.Token() // '}'
		return obj, err
	}
	return jinja.Value{}, fmt.Errorf("unexpected JSON token %v", tok)
}

func numberValue(n json.Number) (jinja.Value, error) {
	s := string(n)
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
