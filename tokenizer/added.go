package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// addedToken is a token matched literally in the text before pre-tokenisation (Hugging Face's
// "added tokens": <|begin_of_text|>, <|eot_id|>, <think>, ...).
type addedToken struct {
	content string
	id      uint32
	// singleWord: match only when not glued to a word character on either side.
	singleWord bool
	// lstrip/rstrip: the match swallows the whitespace on its left/right.
	lstrip, rstrip bool
}

// addedMatcher finds added tokens with Hugging Face's rules: leftmost-longest, non-overlapping
// matches (its Aho-Corasick automaton), then the single_word/lstrip/rstrip adjustments applied
// to each match in order. It is a byte trie; read-only after construction.
type addedMatcher struct {
	tokens []addedToken
	nodes  []trieNode
	// first marks bytes that start some token, so the scan skips ordinary text quickly.
	first [256]bool
}

type trieNode struct {
	next  map[byte]int32
	token int32 // index into tokens, or -1
}

func newAddedMatcher(tokens []addedToken) *addedMatcher {
	m := &addedMatcher{nodes: []trieNode{{token: -1}}}
	for _, t := range tokens {
		if t.content == "" {
			continue // Hugging Face ignores empty added tokens
		}
		n := int32(0)
		for i := 0; i < len(t.content); i++ {
			c := t.content[i]
			child, ok := m.nodes[n].next[c]
			if !ok {
				if m.nodes[n].next == nil {
					m.nodes[n].next = make(map[byte]int32)
				}
				child = int32(len(m.nodes))
				m.nodes = append(m.nodes, trieNode{token: -1})
				m.nodes[n].next[c] = child
			}
			n = child
		}
		if m.nodes[n].token >= 0 {
			// Same content twice: the later entry wins, as in Hugging Face's maps.
			m.tokens[m.nodes[n].token] = t
			continue
		}
		m.nodes[n].token = int32(len(m.tokens))
		m.tokens = append(m.tokens, t)
		m.first[t.content[0]] = true
	}
	return m
}

func (m *addedMatcher) empty() bool { return m == nil || len(m.tokens) == 0 }

// longestAt returns the index of the longest token starting at s[i:] and its end, or -1.
func (m *addedMatcher) longestAt(s string, i int) (tok int32, end int) {
	tok, n := -1, int32(0)
	for j := i; j < len(s); j++ {
		child, ok := m.nodes[n].next[s[j]]
		if !ok {
			break
		}
		n = child
		if t := m.nodes[n].token; t >= 0 {
			tok, end = t, j+1
		}
	}
	return tok, end
}

// split calls emit for each part of s in order: text parts with tok == nil, added tokens with
// their entry. Empty text parts are not emitted.
func (m *addedMatcher) split(s string, emit func(part string, tok *addedToken) error) error {
	if m.empty() {
		if s == "" {
			return nil
		}
		return emit(s, nil)
	}
	done := 0 // end of the last emitted part
	for i := 0; i < len(s); {
		if !m.first[s[i]] {
			i++
			continue
		}
		ti, stop := m.longestAt(s, i)
		if ti < 0 {
			i++
			continue
		}
		start, matchEnd := i, stop
		// The automaton resumes after the raw match whatever the adjustments below do.
		i = matchEnd
		t := &m.tokens[ti]
		if t.singleWord && (endsWithWordChar(s[:start]) || startsWithWordChar(s[stop:])) {
			continue
		}
		if t.lstrip {
			start = max(start-trailingSpaceLen(s[:start]), done)
		}
		if t.rstrip {
			stop += leadingSpaceLen(s[stop:])
		}
		if done < start {
			if err := emit(s[done:start], nil); err != nil {
				return err
			}
		}
		if err := emit(s[start:stop], t); err != nil {
			return err
		}
		done = stop
	}
	if done < len(s) {
		return emit(s[done:], nil)
	}
	return nil
}

// isWordChar approximates Rust regex's Unicode \w (Alphabetic, marks, decimal digits, connector
// punctuation, join controls), which Hugging Face uses for single_word.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) ||
		unicode.Is(unicode.Pc, r) || unicode.Is(unicode.Nl, r) ||
		unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

func endsWithWordChar(s string) bool {
	r, n := utf8.DecodeLastRuneInString(s)
	return n > 0 && isWordChar(r)
}

func startsWithWordChar(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return n > 0 && isWordChar(r)
}

// trailingSpaceLen is the byte length of the whitespace run ending s (Unicode White_Space).
func trailingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeLastRuneInString(s[:len(s)-n])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}

// leadingSpaceLen is the byte length of the whitespace run starting s.
func leadingSpaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			break
		}
		n += size
	}
	return n
}
