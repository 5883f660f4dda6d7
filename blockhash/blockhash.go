// Package blockhash computes kvrouter's block identities (SPEC §3), bit-exact with NVIDIA Dynamo:
// local block hashes are XXH3-64 (seed 1337) over the block's tokens as 4-byte little-endian words,
// and sequence hashes chain them so that one sequence hash names one exact prefix. A block overlapping
// multimodal items (images) appends their u64 hashes; multimodal.go holds how an item's string
// identifier becomes that u64 (a canonical 64-hex identifier: its first 8 bytes big-endian, as Dynamo
// reads vLLM's extra_keys; any other string: XXH3-64 seed 0) and the identifier the router assigns to
// an image (SHA-256 hex of the client's uuid, a data URI's bytes, or the URL).
//
// It is a leaf package: the core, the state stores, the ingest and the simulator all hash through it,
// so there is exactly one implementation of the rules.
package blockhash

import (
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/zeebo/xxh3"
)

// Seed is the XXH3 seed of local and sequence hashes.
const Seed uint64 = 1337

// nativeLittleEndian is true on amd64/arm64: token slices can then be hashed in place, without a copy.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// LoRASeed returns the local-hash seed for a LoRA adapter: 1337 + XXH3-64(name, seed 0), wrapping.
// The empty name is the base model (seed 1337).
func LoRASeed(loraName string) uint64 {
	if loraName == "" {
		return Seed
	}
	return Seed + xxh3.HashString(loraName)
}

// Local hashes one block of tokens with the given seed (Seed, or LoRASeed(name)).
func Local(tokens []uint32, seed uint64) uint64 {
	if len(tokens) == 0 {
		return xxh3.HashSeed(nil, seed)
	}
	if nativeLittleEndian {
		b := unsafe.Slice((*byte)(unsafe.Pointer(&tokens[0])), 4*len(tokens))
		return xxh3.HashSeed(b, seed)
	}
	b := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	return xxh3.HashSeed(b, seed)
}

// LocalMultimodal hashes one block whose tokens carry multimodal objects: the objects' hashes are
// appended, sorted ascending, as u64 little-endian after the token bytes. mm is not modified.
func LocalMultimodal(tokens []uint32, mm []uint64, seed uint64) uint64 {
	if len(mm) == 0 {
		return Local(tokens, seed)
	}
	sorted := slices.Clone(mm)
	slices.Sort(sorted)
	b := make([]byte, 4*len(tokens)+8*len(sorted))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(b[4*i:], t)
	}
	off := 4 * len(tokens)
	for i, h := range sorted {
		binary.LittleEndian.PutUint64(b[off+8*i:], h)
	}
	return xxh3.HashSeed(b, seed)
}

// LocalHashes appends to dst the local hashes of every full block of tokens; a trailing partial
// block is never hashed. blockSize must be > 0.
func LocalHashes(dst []uint64, tokens []uint32, blockSize int, seed uint64) []uint64 {
	n := len(tokens) / blockSize
	dst = slices.Grow(dst, n)
	for i := 0; i < n; i++ {
		dst = append(dst, Local(tokens[i*blockSize:(i+1)*blockSize], seed))
	}
	return dst
}

// Next returns the sequence hash of a block whose parent prefix has sequence hash parent:
// XXH3-64(le_u64(parent) ‖ le_u64(local), seed 1337). The LoRA seed is never used here.
func Next(parent, local uint64) uint64 {
	var b [16]byte
	binary.LittleEndian.PutUint64(b[0:8], parent)
	binary.LittleEndian.PutUint64(b[8:16], local)
	return xxh3.HashSeed(b[:], Seed)
}

// Sequence appends to dst the sequence hashes of a chain of local hashes starting at the root:
// seq[0] = local[0], seq[i] = Next(seq[i-1], local[i]).
func Sequence(dst []uint64, local []uint64) []uint64 {
	dst = slices.Grow(dst, len(local))
	for i, l := range local {
		if i == 0 {
			dst = append(dst, l)
			continue
		}
		dst = append(dst, Next(dst[len(dst)-1], l))
	}
	return dst
}

// SequenceFrom is Sequence for a chain that continues below an existing prefix whose last sequence
// hash is parent (hasParent false means the chain starts at the root).
func SequenceFrom(dst []uint64, parent uint64, hasParent bool, local []uint64) []uint64 {
	if !hasParent {
		return Sequence(dst, local)
	}
	dst = slices.Grow(dst, len(local))
	for _, l := range local {
		parent = Next(parent, l)
		dst = append(dst, parent)
	}
	return dst
}
