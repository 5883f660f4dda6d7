package tokenizer

import (
	"strings"
	"testing"
	"time"
)

// TestLongPieces: a 256 KB single piece (a punctuation run, a letter run, a whitespace run) must
// stay near-linear — the merge queue is a heap, not a rescan per merge — so a hostile prompt
// cannot stall the router. (A quadratic merge would take minutes here.)
func TestLongPieces(t *testing.T) {
	tk := loadData(t, llamaJSON)
	for _, unit := range []string{"!", "a", " ", "日", "=\n"} {
		text := strings.Repeat(unit, 256<<10/len(unit))
		start := time.Now()
		ids := mustEncode(t, tk, text)
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("%q×%d: %v", unit, len(text)/len(unit), d)
		}
		if len(ids) == 0 {
			t.Errorf("%q: no ids", unit)
		}
	}
}
