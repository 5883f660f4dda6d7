package ingest

import (
	"context"
	"maps"
	"slices"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/statestore"
)

// probeRestart asks the engine's replay socket for its buffered messages from the last one applied
// (st.last) on, and looks at the first answer only. An engine process that lived on still holds that
// message — its buffer always keeps its newest message, and st.last is no newer — with the same
// payload. A restarted engine numbers from 0 again: its buffer either ends below st.last (empty
// answer) or holds a different payload there. Either way the rank's index is stale: a new epoch begins
// and its first event, a cleared event per rank this stream fed, makes the store drop the old index
// now instead of at the engine's next message (which may never come while it stays idle). The new
// epoch's history is then replayed from seq 0 when the next live message arrives (handleLive).
//
// An answer whose first message is above st.last (the buffer no longer reaches it: thousands of
// messages missed) is treated as a restart too: the index is as stale either way, and rebuilding it
// from the replay is the only way back. A failed probe (engine unreachable, timeout) proves nothing:
// it is counted and the index kept — a dead engine's worker is the health checks' business.
func (s *Subscriber) probeRestart(ctx context.Context, q chan<- applyItem) error {
	st := &s.st
	if !st.has || s.cfg.ReplayEndpoint == "" {
		return nil // nothing applied in this epoch: nothing stale to clear
	}
	s.update(func(x *Stats) { x.RestartProbes++ })
	found, same := false, false
	err := s.replay(ctx, st.last, func(seq uint64, payload []byte) bool {
		found = seq == st.last
		same = found && xxh3.Hash(payload) == st.lastSum
		return false
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.update(func(x *Stats) { x.ReplayFailures++ })
		s.cfg.Logger.Debug("ingest: restart probe failed", "stream", s.cfg.Key().String(), "err", err)
		return nil
	}
	if same {
		// The same process holds what was applied: whatever it published since shows up as a gap at
		// its next message, so that message needs no second check.
		st.verify = false
		return nil
	}
	reason := "idle probe: the engine's replay buffer lacks the last applied message"
	if found {
		reason = "idle probe: the engine's replay of the last applied message differs"
	}
	ranks := slices.Sorted(maps.Keys(st.nextID))
	if !slices.Contains(ranks, s.cfg.DPRank) {
		ranks = append(ranks, s.cfg.DPRank)
	}
	s.restart(reason, st.last)
	// The new epoch has handed on no message (st.has false): the next live one replays from 0.
	evs := make([]statestore.Event, 0, len(ranks))
	for _, r := range ranks {
		evs = append(evs, statestore.Event{DPRank: r, EventID: 1, HasEventID: true, Epoch: s.st.epoch,
			Kind: statestore.EventCleared})
		s.st.nextID[r] = 2
	}
	select {
	case q <- applyItem{events: evs, ts: float64(s.cfg.Now().UnixMilli()) / 1000}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
