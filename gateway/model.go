package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// errNotString: the body's "model" is not a JSON string.
var errNotString = errors.New(`"model" must be a string`)

// modelField returns the top-level "model" string of a JSON object body by scanning it, without decoding
// the rest: a request's pool is known after a byte loop over the body (encoding/json spends ~1 ms on a
// 70 KB chat body on our box; the body is parsed once more, properly, by the Tokenizer). found is false
// when the key is absent or null; like encoding/json, the last of duplicate keys wins. Errors name the
// first malformed byte found; a body the scan accepts may still be rejected by the full parse later.
func modelField(body []byte) (model string, found bool, err error) {
	s := scanner{b: body}
	s.ws()
	if !s.eat('{') {
		return "", false, s.fail("want a JSON object")
	}
	s.ws()
	if s.eat('}') {
		return "", false, s.end()
	}
	for {
		s.ws()
		k0 := s.i
		if !s.str() {
			return "", false, s.fail("want a string key")
		}
		key := body[k0:s.i]
		s.ws()
		if !s.eat(':') {
			return "", false, s.fail("want ':'")
		}
		s.ws()
		v0 := s.i
		if !s.value() {
			return "", false, s.fail("malformed value")
		}
		if isModelKey(key) {
			v := body[v0:s.i]
			switch {
			case string(v) == "null":
				model, found = "", false
			case v[0] == '"':
				if err := json.Unmarshal(v, &model); err != nil {
					return "", false, fmt.Errorf("model: %w", err)
				}
				found = true
			default:
				return "", false, errNotString
			}
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		if s.eat('}') {
			if err := s.end(); err != nil {
				return "", false, err
			}
			return model, found, nil
		}
		return "", false, s.fail("want ',' or '}'")
	}
}

// isModelKey reports whether a quoted key names "model" as encoding/json matches it, which the gateway's
// full parse uses: case-insensitively ("Model", "modEl"; the fuzz target found the exact match missing
// them) and escaped spellings included. No letter of "model" has a non-ASCII fold (encoding/json's
// special cases are K and S), so Unicode simple folding (strings.EqualFold) matches exactly its keys.
func isModelKey(quoted []byte) bool {
	if bytes.EqualFold(quoted, []byte(`"model"`)) {
		return true
	}
	if len(quoted) > 7 && len(quoted) < 64 {
		var k string
		return json.Unmarshal(quoted, &k) == nil && strings.EqualFold(k, "model")
	}
	return false
}

// scanner skips over JSON values byte by byte.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *scanner) end() error {
	s.ws()
	if s.i != len(s.b) {
		return s.fail("unexpected data after the JSON object")
	}
	return nil
}

func (s *scanner) fail(what string) error {
	return fmt.Errorf("malformed JSON at byte %d: %s", s.i, what)
}

// str skips a string starting at s.i (escapes honoured, not validated): the closing quote is the first
// one preceded by an even number of backslashes, found with bytes.IndexByte.
func (s *scanner) str() bool {
	if !s.eat('"') {
		return false
	}
	start := s.i
	for {
		j := bytes.IndexByte(s.b[s.i:], '"')
		if j < 0 {
			s.i = len(s.b)
			return false
		}
		q := s.i + j
		n := 0
		for p := q - 1; p >= start && s.b[p] == '\\'; p-- {
			n++
		}
		s.i = q + 1
		if n%2 == 0 {
			return true
		}
	}
}

// value skips one value: a string, an object or array (by depth, strings inside skipped), or a scalar.
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		return s.str()
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case '"':
				if !s.str() {
					return false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	}
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}
