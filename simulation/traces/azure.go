package traces

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// azureTimeLayout parses the Azure traces' timestamps, e.g. "2023-11-16 18:15:46.6805900" (the
// fraction may have any number of digits, or none).
const azureTimeLayout = "2006-01-02 15:04:05.999999999"

// LoadAzureFile reads an Azure LLM inference CSV trace (see LoadAzure) from a file, plain or
// gzip-compressed (.csv.gz; see Open).
func LoadAzureFile(path string) ([]Request, error) {
	f, err := Open(path)
	if err != nil {
		return nil, fmt.Errorf("traces: open azure trace: %w", err)
	}
	defer f.Close()
	return loadAzure(f, path)
}

// LoadAzure reads an Azure LLM inference trace (Azure/AzurePublicDataset, Splitwise): a CSV with the
// header TIMESTAMP,ContextTokens,GeneratedTokens (columns found by name, case-insensitive, any order).
// ArrivalMs is the time since the first row, rounded to the nearest millisecond. Requests keep file
// order and carry no hash ids (see SyntheticPrefixes). A row that precedes the first row in time, a
// bad timestamp or a negative count is rejected, naming its line.
func LoadAzure(r io.Reader) ([]Request, error) {
	return loadAzure(r, "")
}

func loadAzure(r io.Reader, name string) ([]Request, error) {
	where := "read azure"
	if name != "" {
		where += " " + name
	}
	cr := csv.NewReader(r)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("traces: %s: empty file, want a TIMESTAMP,ContextTokens,GeneratedTokens header", where)
		}
		return nil, fmt.Errorf("traces: %s: header: %w", where, err)
	}
	cols, err := azureColumns(header)
	if err != nil {
		return nil, fmt.Errorf("traces: %s: header: %w", where, err)
	}
	var (
		reqs []Request
		t0   time.Time
	)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("traces: %s: %w", where, err) // a csv.ParseError names its line
		}
		line, _ := cr.FieldPos(0)
		ts, in, out, err := parseAzureRow(rec, cols)
		if err != nil {
			return nil, fmt.Errorf("traces: %s: line %d: %w", where, line, err)
		}
		if len(reqs) == 0 {
			t0 = ts
		}
		d := ts.Sub(t0)
		if d < 0 {
			return nil, fmt.Errorf("traces: %s: line %d: timestamp %s precedes the first row (%s)",
				where, line, ts.Format(azureTimeLayout), t0.Format(azureTimeLayout))
		}
		ms := int64((d + time.Millisecond/2) / time.Millisecond)
		reqs = append(reqs, Request{ArrivalMs: ms, InputTokens: in, OutputTokens: out})
	}
	return reqs, nil
}

// azureCols holds the index of each needed column.
type azureCols struct{ ts, ctx, gen int }

func azureColumns(header []string) (azureCols, error) {
	c := azureCols{-1, -1, -1}
	for i, h := range header {
		switch strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))) {
		case "timestamp":
			c.ts = i
		case "contexttokens":
			c.ctx = i
		case "generatedtokens":
			c.gen = i
		}
	}
	if c.ts < 0 || c.ctx < 0 || c.gen < 0 {
		return c, fmt.Errorf("want columns TIMESTAMP, ContextTokens, GeneratedTokens, got %q", strings.Join(header, ","))
	}
	return c, nil
}

func parseAzureRow(rec []string, c azureCols) (time.Time, int, int, error) {
	if len(rec) <= max(c.ts, c.ctx, c.gen) {
		return time.Time{}, 0, 0, fmt.Errorf("%d fields, want at least %d", len(rec), max(c.ts, c.ctx, c.gen)+1)
	}
	ts, err := time.Parse(azureTimeLayout, strings.TrimSpace(rec[c.ts]))
	if err != nil {
		return time.Time{}, 0, 0, fmt.Errorf("bad TIMESTAMP %q", rec[c.ts])
	}
	in, err := strconv.Atoi(strings.TrimSpace(rec[c.ctx]))
	if err != nil || in < 0 {
		return time.Time{}, 0, 0, fmt.Errorf("bad ContextTokens %q", rec[c.ctx])
	}
	out, err := strconv.Atoi(strings.TrimSpace(rec[c.gen]))
	if err != nil || out < 0 {
		return time.Time{}, 0, 0, fmt.Errorf("bad GeneratedTokens %q", rec[c.gen])
	}
	return ts, in, out, nil
}
