package statestore

import "fmt"

// MaxEventsPerBatch bounds one ApplyEvents call.
const MaxEventsPerBatch = 1 << 16

// ValidateBatch rejects a malformed batch as a whole, before anything is applied (decoders produce
// only valid kinds and tiers; this guards the store against a caller bug).
func ValidateBatch(b *EventBatch) error {
	if err := CheckID("worker_id", b.WorkerID); err != nil {
		return err
	}
	if len(b.Events) > MaxEventsPerBatch {
		return fmt.Errorf("%w: %d events in one batch (max %d)", ErrInvalid, len(b.Events), MaxEventsPerBatch)
	}
	for i := range b.Events {
		ev := &b.Events[i]
		switch {
		case ev.Kind != EventStored && ev.Kind != EventRemoved && ev.Kind != EventCleared:
			return fmt.Errorf("%w: event %d has unknown kind %d", ErrInvalid, i, ev.Kind)
		case ev.Tier > TierDisk:
			return fmt.Errorf("%w: event %d has unknown tier %d", ErrInvalid, i, ev.Tier)
		case ev.DPRank < 0:
			return fmt.Errorf("%w: event %d has negative dp_rank %d", ErrInvalid, i, ev.DPRank)
		case ev.BlockSize < 0 || ev.BlockSize > MaxBlockSize:
			return fmt.Errorf("%w: event %d has block_size %d outside [0, %d]", ErrInvalid, i, ev.BlockSize, MaxBlockSize)
		}
	}
	return nil
}
