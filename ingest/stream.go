package ingest

import (
	"context"
	"errors"
	"math"

	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/ingest/vllmwire"
)

// stream is the sequence state of one subscriber run. Only the reader goroutine touches it.
type stream struct {
	epoch string
	// has: a message of this epoch was handed on; last is its sequence number and lastSum the XXH3
	// of its payload, which a replay of seq last must reproduce unless the engine restarted.
	has     bool
	last    uint64
	lastSum uint64
	// verify: a reconnect happened since the last message; the next one is checked by replay.
	verify bool
	// nextID is the next event id per dp rank in this epoch (0 = none assigned yet, start at 1).
	nextID map[int]uint64
}

// handleLive places one live message in the sequence: it opens an epoch on the first message or a
// restart, fills gaps from the replay socket, then hands the message on.
func (s *Subscriber) handleLive(ctx context.Context, seq uint64, payload []byte, q chan<- applyItem) error {
	st := &s.st
	switch {
	case !st.has:
		if st.epoch == "" { // else a restart probe opened the epoch and cleared the rank already
			s.startEpoch("first message", seq)
		}
		if err := s.fill(ctx, 0, seq, false, q); err != nil {
			return err
		}
	case seq <= st.last:
		if seq == st.last && xxh3.Hash(payload) == st.lastSum {
			return nil // the same message again: already handed on
		}
		// Only a new engine process numbers from 0 again.
		s.restart("sequence went backwards", seq)
		if err := s.fill(ctx, 0, seq, false, q); err != nil {
			return err
		}
	case seq > st.last+1 || st.verify:
		if seq > st.last+1 {
			missed := seq - st.last - 1
			if missed > maxCountedGap {
				s.cfg.Logger.Warn("ingest: sequence jumped far ahead: counted as one gap of one message",
					"stream", s.cfg.Key().String(), "last_seq", st.last, "seq", seq)
			}
			s.update(func(x *Stats) { x.Gaps++; x.MissedMessages = satAdd(x.MissedMessages, gapCount(missed)) })
		}
		if err := s.fill(ctx, st.last+1, seq, st.verify, q); err != nil {
			return err
		}
	}
	st.verify = false
	return s.deliver(ctx, seq, payload, false, q)
}

// maxCountedGap is the largest sequence gap counted message by message (2^32): no engine publishes
// billions of messages between two a subscriber saw, so a larger jump is a broken or hostile counter
// (SPEC §4.1: a jump ahead is a gap), counted as one gap of one message so the counters stay meaningful.
const maxCountedGap = 1 << 32

// gapCount is the number of messages a gap of n counts for.
func gapCount(n uint64) uint64 {
	if n > maxCountedGap {
		return 1
	}
	return n
}

// satAdd adds without wrapping: counters stop at 2^64−1.
func satAdd(a, b uint64) uint64 {
	if a > math.MaxUint64-b {
		return math.MaxUint64
	}
	return a + b
}

// startEpoch begins a new epoch: the store clears the rank at its first event, ids restart at 1.
func (s *Subscriber) startEpoch(reason string, seq uint64) {
	s.st = stream{epoch: newEpoch(s.cfg.EpochPrefix), nextID: map[int]uint64{}}
	s.update(func(x *Stats) { x.Epoch, x.HasSeq = s.st.epoch, false })
	s.cfg.Logger.Info("ingest: new epoch", "stream", s.cfg.Key().String(), "epoch", s.st.epoch,
		"reason", reason, "seq", seq)
}

func (s *Subscriber) restart(reason string, seq uint64) {
	s.update(func(x *Stats) { x.Restarts++ })
	s.cfg.Logger.Warn("ingest: engine restart detected", "stream", s.cfg.Key().String(),
		"reason", reason, "last_seq", s.st.last, "seq", seq)
	s.startEpoch("engine restart: "+reason, seq)
}

// fill hands on the messages [next, until) from the replay socket, in order. With verify, it first
// checks that the engine still holds the last handed-on message unchanged; if not, the engine
// restarted: a new epoch begins and its history [0, until) is replayed instead.
//
// Messages the replay cannot provide are lost (counted, and one event id is skipped so the store
// reports the rank degraded) — except at the start of an epoch, where history older than the
// engine's buffer is simply not there (counted as partial history).
func (s *Subscriber) fill(ctx context.Context, next, until uint64, verify bool, q chan<- applyItem) error {
	st := &s.st
	epochStart := !st.has
	if next >= until && !verify {
		return nil
	}
	missing := func(n uint64) {
		if n == 0 {
			return
		}
		if epochStart {
			s.update(func(x *Stats) { x.PartialHistory++ })
			return
		}
		s.lose(n)
	}
	if s.cfg.ReplayEndpoint == "" {
		missing(until - next)
		return nil
	}
	var (
		restarted bool
		derr      error
	)
	for round := 0; round < s.cfg.ReplayMaxRounds && !restarted && derr == nil; round++ {
		checking := verify && round == 0
		from := next
		if checking {
			from = st.last
		}
		if next >= until && !checking {
			break
		}
		progress, sawFirst := false, false
		s.update(func(x *Stats) { x.Replays++ })
		err := s.replay(ctx, from, func(seq uint64, payload []byte) bool {
			if seq < next {
				if checking && seq == st.last && xxh3.Hash(payload) != st.lastSum {
					restarted = true
					return false
				}
				return true
			}
			if seq >= until {
				return false
			}
			if seq > next {
				if sawFirst {
					return false // a hole inside the answer (the engine dropped replies): ask again
				}
				missing(seq - next) // the engine's buffer starts above next
				epochStart = false
			}
			sawFirst = true
			if derr = s.deliver(ctx, seq, payload, true, q); derr != nil {
				return false
			}
			next, progress, epochStart = seq+1, true, false
			return next < until
		})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err() // stopping: not a failure, and nothing is lost
			}
			s.update(func(x *Stats) { x.ReplayFailures++ })
			s.cfg.Logger.Warn("ingest: replay failed", "stream", s.cfg.Key().String(), "err", err)
			var tooBig *frameLimitError
			if errors.As(err, &tooBig) && next < until {
				// The answer broke off at the message after the last one taken, seq next (its buffer
				// is in order): that one can never be read, so skip it and ask for the rest.
				missing(1)
				next, epochStart = next+1, false
				continue
			}
			break
		}
		if !progress && !checking {
			break
		}
	}
	if derr != nil {
		return derr
	}
	if restarted {
		s.restart("replayed payload differs from the one applied", until)
		return s.fill(ctx, 0, until, false, q)
	}
	if next < until {
		missing(until - next)
	}
	return nil
}

// lose accounts for n messages that will never be applied: one event id is skipped on every rank
// of the epoch, so the store sees a gap and reports the rank degraded (SPEC §4.1).
func (s *Subscriber) lose(n uint64) {
	n = gapCount(n)
	s.update(func(x *Stats) { x.LostMessages = satAdd(x.LostMessages, n) })
	st := &s.st
	if st.nextID == nil {
		st.nextID = map[int]uint64{}
	}
	if st.nextID[s.cfg.DPRank] == 0 {
		st.nextID[s.cfg.DPRank] = 1
	}
	for r := range st.nextID {
		st.nextID[r]++
	}
	s.cfg.Logger.Warn("ingest: KV events lost", "stream", s.cfg.Key().String(), "messages", n,
		"epoch", st.epoch, "last_seq", st.last)
}

// deliver decodes and normalises one message and queues it for the sink, blocking while the queue
// is full (back-pressure). It returns an error only when ctx is done.
func (s *Subscriber) deliver(ctx context.Context, seq uint64, payload []byte, replayed bool, q chan<- applyItem) error {
	st := &s.st
	st.has, st.last, st.lastSum = true, seq, xxh3.Hash(payload)
	s.update(func(x *Stats) {
		x.LastSeq, x.HasSeq = seq, true
		if replayed {
			x.ReplayedMessages++
		}
	})
	if s.cfg.Capture != nil {
		s.cfg.Capture(seq, payload)
	}
	b, err := vllmwire.Decode(payload)
	if err != nil {
		s.malformed(err)
		s.lose(1)
		return nil
	}
	rank := s.cfg.DPRank
	if b.HasDPRank {
		rank = b.DPRank
	}
	first := max(st.nextID[rank], 1)
	evs, ns := Normalize(nil, b, NormalizeParams{
		DPRank: s.cfg.DPRank, Epoch: st.epoch, FirstEventID: first, PoolBlockSize: s.cfg.BlockSize,
	})
	st.nextID[rank] = first + uint64(len(evs))
	s.update(func(x *Stats) { x.Events.Add(ns) })
	if len(evs) == 0 {
		return nil
	}
	select {
	case q <- applyItem{events: evs, ts: b.TS}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
