package core

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// Hash is a 64-bit block hash in JSON: a bare unsigned integer (SPEC §3). A negative integer (an engine's
// i64) is bit-cast to u64. Decoding never goes through float64, so no precision is lost.
type Hash uint64

// UnmarshalJSON implements json.Unmarshaler.
func (h *Hash) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if u, err := strconv.ParseUint(s, 10, 64); err == nil {
		*h = Hash(u)
		return nil
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		*h = Hash(uint64(i))
		return nil
	}
	return fmt.Errorf("block hash must be a 64-bit integer, got %.40s", s)
}

// MarshalJSON implements json.Marshaler.
func (h Hash) MarshalJSON() ([]byte, error) { return strconv.AppendUint(nil, uint64(h), 10), nil }

// FlexString accepts a JSON string or number (worker ids and epochs may be numbers).
type FlexString string

// UnmarshalJSON implements json.Unmarshaler.
func (f *FlexString) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*f = FlexString(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("must be a string or a number")
	}
	*f = FlexString(n.String())
	return nil
}
