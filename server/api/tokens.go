package api

import (
	"fmt"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// routeBody decodes a route request like core.RouteInput, but parses token_ids with a hand-written
// parser: a 1,024-token prompt spent half of its decision time in encoding/json's reflective decoding
// of the array. The embedded RouteInput keeps every other field (and DisallowUnknownFields) as is; the
// outer TokenIDs shadows the embedded one.
type routeBody struct {
	core.RouteInput
	TokenIDs tokenList `json:"token_ids,omitempty"`
	// Pointers shadow the embedded fields so that an explicit 0 or "" is seen (and refused) rather than
	// silently meaning "absent".
	BlockSize *int    `json:"block_size,omitempty"`
	RequestID *string `json:"request_id,omitempty"`
}

// input checks what only the HTTP body can get wrong and returns the router's input.
func (b *routeBody) input() (core.RouteInput, error) {
	in := b.RouteInput
	in.TokenIDs = []uint32(b.TokenIDs)
	if b.BlockSize != nil {
		if *b.BlockSize <= 0 {
			return in, fmt.Errorf("%w: block_size must be > 0 when given, got %d", statestore.ErrInvalid, *b.BlockSize)
		}
		in.BlockSize = *b.BlockSize
	}
	if b.RequestID != nil {
		if err := statestore.CheckID("request_id", *b.RequestID); err != nil {
			return in, err
		}
		in.RequestID = *b.RequestID
	}
	in.RequirePrompt = true
	return in, nil
}

// tokenList is a JSON array of u32 token ids.
type tokenList []uint32

// UnmarshalJSON parses [n, n, ...] (or null) where each n is a plain non-negative integer < 2^32.
func (t *tokenList) UnmarshalJSON(b []byte) error {
	i := skipWS(b, 0)
	if i < len(b) && b[i] == 'n' {
		*t = nil
		return nil // encoding/json only passes a well-formed value: this is null
	}
	if i >= len(b) || b[i] != '[' {
		return fmt.Errorf("field \"token_ids\" must be an array of token ids, got JSON %s", jsonKind(b[i:]))
	}
	out := make([]uint32, 0, len(b)/6+1)
	i = skipWS(b, i+1)
	if i < len(b) && b[i] == ']' {
		*t = out
		return nil
	}
	for {
		start := i
		var v uint64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + uint64(b[i]-'0')
			i++
			if v > 0xFFFFFFFF {
				break
			}
		}
		end := i
		for end < len(b) && b[end] != ',' && b[end] != ']' && b[end] != ' ' && b[end] != '\t' && b[end] != '\n' && b[end] != '\r' {
			end++
		}
		if i == start || i != end || v > 0xFFFFFFFF || (end-start > 1 && b[start] == '0') {
			return fmt.Errorf("field \"token_ids\": element %d is not a token id (an integer in [0, 4294967295]): %.40s", len(out), b[start:end])
		}
		out = append(out, uint32(v))
		i = skipWS(b, i)
		if i < len(b) && b[i] == ',' {
			i = skipWS(b, i+1)
			continue
		}
		if i < len(b) && b[i] == ']' {
			*t = out
			return nil
		}
		return fmt.Errorf("field \"token_ids\": malformed array")
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case '"':
		return "string"
	case '{':
		return "object"
	case '[':
		return "array"
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	}
	return "number"
}
