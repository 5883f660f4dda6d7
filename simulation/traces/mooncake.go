package traces

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
)

// maxLineBytes bounds one JSONL line (a 1 M-token prompt has ~2 k hash ids, ~20 KB of text).
const maxLineBytes = 64 << 20

// mooncakeRecord is one line of a Mooncake trace. Pointers tell a missing field from a zero.
type mooncakeRecord struct {
	Timestamp    *json.Number `json:"timestamp"`
	InputLength  *int         `json:"input_length"`
	OutputLength *int         `json:"output_length"`
	HashIDs      *[]uint64    `json:"hash_ids"`
}

// LoadMooncakeFile reads a Mooncake JSONL trace (see LoadMooncake) from a file, plain or gzip-compressed
// (.jsonl.gz), or from a bundled trace such as MooncakeConversation (see Open).
func LoadMooncakeFile(path string) ([]Request, error) {
	f, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("traces: open mooncake trace: %w", err)
	}
	defer f.Close()
	return loadMooncake(f, path)
}

// LoadMooncake reads a Mooncake JSONL trace: one object per line,
// {"timestamp": ms, "input_length": tokens, "output_length": tokens, "hash_ids": [...]}.
// Requests keep file order. Blank lines (a trailing newline) are skipped; unknown fields are ignored.
// A record is rejected, naming its line, when a field is missing, a length is negative, or hash_ids
// does not hold exactly ceil(input_length / 512) ids (the trace convention that Tokens relies on).
func LoadMooncake(r io.Reader) ([]Request, error) {
	return loadMooncake(r, "")
}

func loadMooncake(r io.Reader, name string) ([]Request, error) {
	where := "read mooncake"
	if name != "" {
		where += " " + name
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var reqs []Request
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		req, err := parseMooncakeLine(b)
		if err != nil {
			return nil, fmt.Errorf("traces: %s: line %d: %w", where, line, err)
		}
		reqs = append(reqs, req)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("traces: %s: after line %d: %w", where, line, err)
	}
	return reqs, nil
}

func parseMooncakeLine(b []byte) (Request, error) {
	var rec mooncakeRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return Request{}, err
	}
	switch {
	case rec.Timestamp == nil:
		return Request{}, errors.New("timestamp missing")
	case rec.InputLength == nil:
		return Request{}, errors.New("input_length missing")
	case rec.OutputLength == nil:
		return Request{}, errors.New("output_length missing")
	case rec.HashIDs == nil:
		return Request{}, errors.New("hash_ids missing")
	}
	ts, err := parseMillis(*rec.Timestamp)
	if err != nil {
		return Request{}, err
	}
	in, out, ids := *rec.InputLength, *rec.OutputLength, *rec.HashIDs
	if in < 0 || out < 0 {
		return Request{}, fmt.Errorf("negative length (input_length %d, output_length %d)", in, out)
	}
	if want := traceBlocks(in); len(ids) != want {
		return Request{}, fmt.Errorf("hash_ids has %d ids, want ceil(input_length %d / %d) = %d",
			len(ids), in, TraceBlockTokens, want)
	}
	return Request{ArrivalMs: ts, InputTokens: in, OutputTokens: out, HashIDs: ids}, nil
}

// parseMillis accepts an integer or a fractional millisecond timestamp (rounded to the nearest ms).
func parseMillis(n json.Number) (int64, error) {
	if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		if v < 0 {
			return 0, fmt.Errorf("negative timestamp %d", v)
		}
		return v, nil
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > math.MaxInt64/2 {
		return 0, fmt.Errorf("bad timestamp %q", string(n))
	}
	return int64(math.Round(f)), nil
}
