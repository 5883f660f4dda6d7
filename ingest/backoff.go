package ingest

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is a bounded exponential backoff with full jitter in [d/2, d): it doubles from min to max.
type backoff struct {
	min, max, cur time.Duration
}

func newBackoff(min, max time.Duration) *backoff { return &backoff{min: min, max: max} }

func (b *backoff) next() time.Duration {
	switch {
	case b.cur == 0:
		b.cur = b.min
	case b.cur < b.max:
		b.cur = min(2*b.cur, b.max)
	}
	if b.cur <= 1 {
		return b.cur
	}
	half := b.cur / 2
	return half + rand.N(b.cur-half)
}

func (b *backoff) reset() { b.cur = 0 }

// sleepCtx waits d or until ctx is done; it reports whether the full wait elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
