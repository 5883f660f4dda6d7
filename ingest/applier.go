package ingest

import (
	"context"
	"math"

	"github.com/kvrouter/kvrouter/statestore"
)

// applyLoop takes queued messages in order, coalesces what is already waiting into one EventBatch
// of up to MaxBatchEvents events (growth stops once reached; one message is never split), and
// applies it, retrying a failed call with the same events until it succeeds or ctx is done.
func (s *Subscriber) applyLoop(ctx context.Context, q <-chan applyItem) {
	warnedBlockSize := false
	for {
		var it applyItem
		select {
		case <-ctx.Done():
			return
		case it = <-q:
		}
		events, ts := it.events, it.ts
	coalesce:
		for len(events) < s.cfg.MaxBatchEvents {
			select {
			case more := <-q:
				events, ts = append(events, more.events...), more.ts
			default:
				break coalesce
			}
		}
		res, ok := s.applyRetry(ctx, events)
		if !ok {
			return
		}
		lag := int64(0)
		if nowMs := float64(s.cfg.Now().UnixMilli()); !math.IsNaN(ts) && !math.IsInf(ts, 0) {
			lag = int64(nowMs - ts*1000)
		}
		s.update(func(x *Stats) { x.Applied.Add(res); x.ApplyCalls++; x.LagMs = lag })
		if res.BlockSizeMismatch > 0 && !warnedBlockSize {
			// Loud and once: a block size mismatch silently breaks all matching for this worker.
			warnedBlockSize = true
			s.cfg.Logger.Error("ingest: engine block_size differs from the pool's; its events are dropped",
				"stream", s.cfg.Key().String(), "pool_block_size", s.cfg.BlockSize, "events", res.BlockSizeMismatch)
		}
	}
}

func (s *Subscriber) applyRetry(ctx context.Context, events []statestore.Event) (statestore.ApplyResult, bool) {
	bo := newBackoff(s.cfg.ApplyRetryMin, s.cfg.ApplyRetryMax)
	for {
		batch := statestore.EventBatch{
			Pool: s.cfg.Pool, WorkerID: s.cfg.WorkerID, Events: events, NowMs: s.cfg.Now().UnixMilli(),
		}
		res, err := s.sink.ApplyEvents(ctx, batch)
		if err == nil {
			return res, true
		}
		if ctx.Err() != nil {
			return res, false
		}
		s.update(func(x *Stats) { x.ApplyErrors++ })
		d := bo.next()
		s.cfg.Logger.Warn("ingest: apply events failed, retrying", "stream", s.cfg.Key().String(),
			"events", len(events), "err", err, "backoff", d)
		if !sleepCtx(ctx, d) {
			return res, false
		}
	}
}
