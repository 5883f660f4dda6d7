package vllmwire

import (
	"fmt"
	"math"
)

// Decode parses one EventBatch payload, in array or map form. Any error wraps ErrMalformed or
// ErrLimit and names the offending value; the returned batch is then empty.
func Decode(data []byte) (Batch, error) {
	r := reader{buf: data}
	var (
		b   Batch
		err error
	)
	switch {
	case r.isArray():
		err = r.batchArray(&b)
	case r.isMap():
		err = r.batchMap(&b)
	default:
		err = errMalformed("EventBatch is neither an array nor a map")
	}
	if err == nil && r.remaining() != 0 {
		err = errMalformed("%d trailing bytes after the EventBatch", r.remaining())
	}
	if err != nil {
		return Batch{}, fmt.Errorf("vllmwire: decode batch: %w", err)
	}
	return b, nil
}

// batchArray decodes [ts, events, data_parallel_rank?, …ignored].
func (r *reader) batchArray(b *Batch) error {
	n, err := r.readArrayLen()
	if err != nil {
		return err
	}
	if n < 2 {
		return errMalformed("EventBatch array has %d slots, want at least 2 (ts, events)", n)
	}
	if b.TS, err = r.readFloat(); err != nil {
		return fmt.Errorf("ts: %w", err)
	}
	if b.Events, err = r.events(); err != nil {
		return err
	}
	if n >= 3 {
		if err := r.dpRank(b); err != nil {
			return err
		}
	}
	for i := 3; i < n; i++ {
		if err := r.skip(1); err != nil {
			return fmt.Errorf("EventBatch slot %d: %w", i, err)
		}
	}
	return nil
}

// batchMap decodes {"ts", "events", "data_parallel_rank"?, …ignored keys}. SGLang names the rank slot
// "attn_dp_rank" (its EventBatch; the array slot is the same third one).
func (r *reader) batchMap(b *Batch) error {
	n, err := r.readMapLen()
	if err != nil {
		return err
	}
	hasEvents := false
	for range n {
		key, ok, err := r.mapKey()
		if err != nil {
			return err
		}
		switch {
		case !ok:
			err = r.skip(1)
		case key == "ts":
			b.TS, err = r.readFloat()
		case key == "events":
			b.Events, err = r.events()
			hasEvents = true
		case key == "data_parallel_rank" || key == "attn_dp_rank": // vLLM's name, SGLang's
			err = r.dpRank(b)
		default:
			err = r.skip(1)
		}
		if err != nil {
			return fmt.Errorf("EventBatch key %q: %w", key, err)
		}
	}
	if !hasEvents {
		return errMalformed(`EventBatch map has no "events"`)
	}
	return nil
}

// mapKey reads a map key. A key that is not a string is skipped (ok false): its value is unknown too.
func (r *reader) mapKey() (key string, ok bool, err error) {
	c, err := r.peek()
	if err != nil {
		return "", false, err
	}
	if isStrType(c) {
		key, err = r.readString()
		return key, err == nil, err
	}
	return "", false, r.skip(1)
}

func (r *reader) dpRank(b *Batch) error {
	if r.readNil() {
		b.DPRank, b.HasDPRank = 0, false
		return nil
	}
	v, err := r.readIntRange(0, MaxDPRank)
	if err != nil {
		return fmt.Errorf("data_parallel_rank: %w", err)
	}
	b.DPRank, b.HasDPRank = int(v), true
	return nil
}

func (r *reader) events() ([]Event, error) {
	n, err := r.readArrayLen()
	if err != nil {
		return nil, fmt.Errorf("events: %w", err)
	}
	if n > MaxEvents {
		return nil, errLimit("events: %d events in one batch (max %d)", n, MaxEvents)
	}
	evs := make([]Event, 0, min(n, initialCap))
	for i := range n {
		var ev Event
		switch {
		case r.isArray():
			err = r.eventArray(&ev)
		case r.isMap():
			err = r.eventMap(&ev)
		default:
			err = errMalformed("event is neither an array nor a map")
		}
		if err != nil {
			return nil, fmt.Errorf("events[%d]: %w", i, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// eventArray decodes a tagged array event. Slots past the ones this package knows are skipped.
func (r *reader) eventArray(ev *Event) error {
	n, err := r.readArrayLen()
	if err != nil {
		return err
	}
	if n == 0 {
		return errMalformed("empty event array (no tag)")
	}
	tag, err := r.readString()
	if err != nil {
		return fmt.Errorf("tag: %w", err)
	}
	var fields []string // positional field names after the tag, in vLLM's declaration order
	switch tag {
	case TagStored:
		ev.Kind = KindStored
		// extra_keys is the last slot whose position is stable; later slots are skipped.
		fields = storedFields
		if n < 5 {
			return errMalformed("%s has %d slots, want at least 5", tag, n)
		}
	case TagRemoved:
		ev.Kind = KindRemoved
		fields = removedFields
		if n < 2 {
			return errMalformed("%s has %d slots, want at least 2", tag, n)
		}
	case TagCleared:
		ev.Kind = KindCleared
	default:
		ev.Kind, ev.Type = KindUnknown, tag
	}
	for i := 1; i < n; i++ {
		name := ""
		if i-1 < len(fields) {
			name = fields[i-1]
		}
		if err := r.field(ev, name); err != nil {
			return fmt.Errorf("%s slot %d %s: %w", tag, i, name, err)
		}
	}
	return nil
}

// Positional fields of the array form, after the tag.
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"}
	removedFields = []string{"block_hashes", "medium"}
)

// eventMap decodes a map event {"type": tag, field: value, …}. Fields that do not belong to the
// event's kind are dropped after decoding (their type is still checked).
func (r *reader) eventMap(ev *Event) error {
	n, err := r.readMapLen()
	if err != nil {
		return err
	}
	var (
		tag  string
		seen uint32 // bit i: storedFields[i] was present
	)
	for range n {
		key, ok, err := r.mapKey()
		if err != nil {
			return err
		}
		switch {
		case !ok:
			err = r.skip(3)
		case key == "type":
			tag, err = r.readString()
		default:
			name := ""
			if i := fieldIndex(key); i >= 0 {
				name = key
				seen |= 1 << i
			}
			err = r.field(ev, name)
		}
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
	}
	var required []string
	switch tag {
	case TagStored:
		ev.Kind = KindStored
		required = []string{"block_hashes", "token_ids", "block_size"}
	case TagRemoved:
		*ev = Event{Kind: KindRemoved, BlockHashes: ev.BlockHashes, Medium: ev.Medium}
		required = []string{"block_hashes"}
	case TagCleared:
		*ev = Event{Kind: KindCleared}
	case "":
		return errMalformed(`event map has no "type"`)
	default:
		*ev = Event{Kind: KindUnknown, Type: tag}
	}
	for _, f := range required {
		if seen&(1<<fieldIndex(f)) == 0 {
			return errMalformed("%s map has no %q", tag, f)
		}
	}
	return nil
}

// fieldIndex returns the position of name in storedFields (a superset of every kind's fields), or -1.
func fieldIndex(name string) int {
	for i, f := range storedFields {
		if f == name {
			return i
		}
	}
	return -1
}

// field decodes the value of one named field into ev; an empty or unknown name skips the value.
func (r *reader) field(ev *Event, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.BlockHashes, err = r.hashes()
	case "parent_block_hash":
		ev.HasParent = !r.readNil()
		if ev.HasParent {
			ev.Parent, err = r.readHash()
		}
	case "token_ids":
		ev.TokenIDs, err = r.tokens()
	case "block_size":
		var v int64
		v, err = r.readIntRange(0, MaxBlockSize)
		ev.BlockSize = int(v)
	case "lora_id":
		ev.HasLoRAID = !r.readNil()
		if ev.HasLoRAID {
			ev.LoRAID, err = r.readIntRange(math.MinInt64, math.MaxInt64)
		}
	case "medium":
		if !r.readNil() {
			ev.Medium, err = r.readString()
		}
	case "lora_name":
		switch {
		case r.isMap():
			// SGLang's BlockStoredWithMetadata puts its metadata struct ({"cache_salt": …}) in this
			// slot; the salt is not part of kvrouter's block identity, so it is skipped.
			err = r.skip(3)
		case !r.readNil():
			ev.LoRAName, err = r.readString()
		}
	case "extra_keys":
		ev.ExtraKeys, err = r.extraKeys()
	default: // anything newer: skipped unread
		err = r.skip(3)
	}
	return err
}

// extraKeys decodes BlockStored.extra_keys: nil, or a list with one entry per block, each nil or a
// tuple of keys. It is lenient about shapes: an entry or element it does not know is skipped (its
// nesting still bounded), since extra_keys carries engine-private data beside multimodal items and a
// newer engine may add kinds; only a broken msgpack value fails the batch.
func (r *reader) extraKeys() ([][]ExtraKey, error) {
	if r.readNil() {
		return nil, nil
	}
	if !r.isArray() {
		return nil, r.skip(3)
	}
	n, err := r.readArrayLen()
	if err != nil {
		return nil, err
	}
	out := make([][]ExtraKey, 0, min(n, initialCap))
	for i := range n {
		keys, err := r.blockExtraKeys()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		out = append(out, keys)
	}
	return out, nil
}

// blockExtraKeys decodes one block's entry: nil or a tuple of keys (any other value is skipped).
func (r *reader) blockExtraKeys() ([]ExtraKey, error) {
	if r.readNil() {
		return nil, nil
	}
	if !r.isArray() {
		return nil, r.skip(4)
	}
	m, err := r.readArrayLen()
	if err != nil {
		return nil, err
	}
	var keys []ExtraKey
	for j := range m {
		k, ok, err := r.extraKey()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", j, err)
		}
		if ok {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// extraKey decodes one element of a block's tuple: a str (kept), an [identifier str, offset int] pair
// (kept, Pair), anything else (bytes, numbers, other shapes: skipped, ok false).
func (r *reader) extraKey() (ExtraKey, bool, error) {
	c, err := r.peek()
	if err != nil {
		return ExtraKey{}, false, err
	}
	if isStrType(c) {
		s, err := r.readString()
		return ExtraKey{Identifier: s}, err == nil, err
	}
	if !r.isArray() {
		return ExtraKey{}, false, r.skip(4)
	}
	n, err := r.readArrayLen()
	if err != nil {
		return ExtraKey{}, false, err
	}
	if n != 2 {
		for range n {
			if err := r.skip(5); err != nil {
				return ExtraKey{}, false, err
			}
		}
		return ExtraKey{}, false, nil
	}
	k := ExtraKey{Pair: true}
	idOK, offOK := false, false
	if c, err = r.peek(); err == nil {
		if isStrType(c) {
			k.Identifier, err = r.readString()
			idOK = err == nil
		} else {
			err = r.skip(5)
		}
	}
	if err == nil {
		if c, err = r.peek(); err == nil {
			if isIntType(c) {
				var bits uint64
				bits, _, err = r.readInteger()
				k.Offset, offOK = int64(bits), err == nil
			} else {
				err = r.skip(5)
			}
		}
	}
	if err != nil {
		return ExtraKey{}, false, err
	}
	return k, idOK && offOK, nil
}

// isIntType reports whether c starts a msgpack integer.
func isIntType(c byte) bool {
	return c <= 0x7f || c >= 0xe0 || (c >= mpUint8 && c <= mpInt64)
}

// isStrType reports whether c starts a msgpack str (not bin).
func isStrType(c byte) bool {
	return c&0xe0 == 0xa0 || c == mpStr8 || c == mpStr16 || c == mpStr32
}

func (r *reader) hashes() ([]uint64, error) {
	n, err := r.readArrayLen()
	if err != nil || n == 0 {
		return nil, err
	}
	hs := make([]uint64, 0, min(n, initialCap))
	for i := range n {
		h, err := r.readHash()
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		hs = append(hs, h)
	}
	return hs, nil
}

// tokens decodes token_ids: a list of ints, or (EAGLE) a list of [token, next_token] pairs, which is
// flattened to every pair's first element followed by the last pair's second.
func (r *reader) tokens() ([]uint32, error) {
	n, err := r.readArrayLen()
	if err != nil || n == 0 {
		return nil, err
	}
	pairs := r.isArray()
	ts := make([]uint32, 0, min(n+1, initialCap))
	for i := range n {
		if pairs {
			m, err := r.readArrayLen()
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			if m != 2 {
				return nil, errMalformed("[%d]: EAGLE token pair has %d items, want 2", i, m)
			}
		}
		t, err := r.readIntRange(0, math.MaxUint32)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		ts = append(ts, uint32(t))
		if pairs {
			next, err := r.readIntRange(0, math.MaxUint32)
			if err != nil {
				return nil, fmt.Errorf("[%d][1]: %w", i, err)
			}
			if i == n-1 {
				ts = append(ts, uint32(next))
			}
		}
	}
	return ts, nil
}
