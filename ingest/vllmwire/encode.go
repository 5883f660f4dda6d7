package vllmwire

import "fmt"

// Form is the msgpack layout of an encoded batch.
type Form uint8

const (
	// FormArray is msgspec's array_like=True layout: positional arrays, events tagged in slot 0.
	FormArray Form = iota
	// FormMap is msgspec's default layout: maps with field names, events tagged by "type".
	FormMap
)

// HashEncoding is how block hashes are written.
type HashEncoding uint8

const (
	// HashUint writes hashes as msgpack unsigned integers.
	HashUint HashEncoding = iota
	// HashInt writes hashes bit-cast to int64 (negative when the top bit is set), as vLLM did with
	// Python's built-in hash().
	HashInt
	// HashBytes writes 32-byte strings (the shape of vLLM's sha256 digests): 24 zero bytes, then the
	// hash big-endian, so the decoder's "last 8 bytes" rule gives the hash back.
	HashBytes
)

// EncodeOptions selects the layout of Encode's output. The zero value is vLLM's array form with
// integer hashes.
type EncodeOptions struct {
	Form   Form
	Hashes HashEncoding
}

// Validate reports options outside the declared enums.
func (o EncodeOptions) Validate() error {
	if o.Form > FormMap {
		return fmt.Errorf("vllmwire: encode options: unknown form %d: %w", o.Form, ErrUnencodable)
	}
	if o.Hashes > HashBytes {
		return fmt.Errorf("vllmwire: encode options: unknown hash encoding %d: %w", o.Hashes, ErrUnencodable)
	}
	return nil
}

// Encode returns the payload vLLM would publish for b (msgspec, omit_defaults=True): the dp rank slot
// or key is omitted when !HasDPRank; Stored events carry every field up to lora_name, and extra_keys
// too when the event has any (it defaults to nil: omitted otherwise); nil stands for a missing parent,
// LoRA id, medium or LoRA name, and for a block without extra keys.
func Encode(b Batch, opts EncodeOptions) ([]byte, error) {
	return AppendEncode(nil, b, opts)
}

// AppendEncode is Encode appending to dst.
func AppendEncode(dst []byte, b Batch, opts EncodeOptions) ([]byte, error) {
	if err := opts.Validate(); err != nil {
		return dst, err
	}
	for i := range b.Events {
		if k := b.Events[i].Kind; k < KindStored || k > KindCleared {
			return dst, fmt.Errorf("vllmwire: encode batch: events[%d] has kind %d: %w", i, k, ErrUnencodable)
		}
	}
	slots := 2
	if b.HasDPRank {
		slots = 3
	}
	if opts.Form == FormMap {
		dst = appendMapHeader(dst, slots)
		dst = appendString(dst, "ts")
	} else {
		dst = appendArrayHeader(dst, slots)
	}
	dst = appendFloat64(dst, b.TS)
	if opts.Form == FormMap {
		dst = appendString(dst, "events")
	}
	dst = appendArrayHeader(dst, len(b.Events))
	for i := range b.Events {
		dst = appendEvent(dst, &b.Events[i], opts)
	}
	if b.HasDPRank {
		if opts.Form == FormMap {
			dst = appendString(dst, "data_parallel_rank")
		}
		dst = appendInt(dst, int64(b.DPRank))
	}
	return dst, nil
}

func appendEvent(dst []byte, ev *Event, opts EncodeOptions) []byte {
	var names []string
	switch ev.Kind {
	case KindStored:
		names = storedFields[:7] // extra_keys defaults to nil: omitted when the event has none
		if ev.ExtraKeys != nil {
			names = storedFields[:8]
		}
	case KindRemoved:
		names = removedFields
	}
	if opts.Form == FormMap {
		dst = appendMapHeader(dst, 1+len(names))
		dst = appendString(dst, "type")
	} else {
		dst = appendArrayHeader(dst, 1+len(names))
	}
	dst = appendString(dst, ev.Kind.String())
	for _, name := range names {
		if opts.Form == FormMap {
			dst = appendString(dst, name)
		}
		dst = appendField(dst, ev, name, opts.Hashes)
	}
	return dst
}

func appendField(dst []byte, ev *Event, name string, h HashEncoding) []byte {
	switch name {
	case "block_hashes":
		dst = appendArrayHeader(dst, len(ev.BlockHashes))
		for _, x := range ev.BlockHashes {
			dst = appendHash(dst, x, h)
		}
	case "parent_block_hash":
		if !ev.HasParent {
			return appendNil(dst)
		}
		dst = appendHash(dst, ev.Parent, h)
	case "token_ids":
		dst = appendArrayHeader(dst, len(ev.TokenIDs))
		for _, t := range ev.TokenIDs {
			dst = appendUint(dst, uint64(t))
		}
	case "block_size":
		dst = appendInt(dst, int64(ev.BlockSize))
	case "lora_id":
		if !ev.HasLoRAID {
			return appendNil(dst)
		}
		dst = appendInt(dst, ev.LoRAID)
	case "medium":
		dst = appendOptString(dst, ev.Medium)
	case "lora_name":
		dst = appendOptString(dst, ev.LoRAName)
	case "extra_keys":
		dst = appendArrayHeader(dst, len(ev.ExtraKeys))
		for _, keys := range ev.ExtraKeys {
			if keys == nil {
				dst = appendNil(dst)
				continue
			}
			dst = appendArrayHeader(dst, len(keys))
			for _, k := range keys {
				if k.Pair {
					dst = appendArrayHeader(dst, 2)
					dst = appendString(dst, k.Identifier)
					dst = appendInt(dst, k.Offset)
					continue
				}
				dst = appendString(dst, k.Identifier)
			}
		}
	}
	return dst
}

func appendOptString(dst []byte, s string) []byte {
	if s == "" {
		return appendNil(dst)
	}
	return appendString(dst, s)
}

func appendHash(dst []byte, x uint64, h HashEncoding) []byte {
	switch h {
	case HashInt:
		return appendInt(dst, int64(x))
	case HashBytes:
		var d [32]byte
		for i := range 8 {
			d[31-i] = byte(x >> (8 * i))
		}
		return appendBin(dst, d[:])
	}
	return appendUint(dst, x)
}
