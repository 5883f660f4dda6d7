package blockhash

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/zeebo/xxh3"
)

// Multimodal block identity (SPEC §3 "Multimodal"). An image (or any multimodal item) expands to a
// run of placeholder tokens that are the same for every image, so the tokens alone cannot tell two
// images apart: every block that overlaps an item's placeholder run appends the item's u64 hash to
// its token bytes (LocalMultimodal). Engines name items by string identifiers (vLLM: the request's
// multi_modal_uuids, else its own content digest) and publish them per block in BlockStored's
// extra_keys; MMIdentifierHash turns such a string into the u64 that is folded.

// MMItem is one multimodal item of a prompt: its identity and the span of its placeholder tokens.
type MMItem struct {
	// Hash is the item's identity, MMIdentifierHash of its identifier.
	Hash uint64 `json:"hash"`
	// Offset is the index of the item's first placeholder token in the prompt, tokens.
	Offset int `json:"offset"`
	// Length is the number of placeholder tokens, >= 1.
	Length int `json:"length"`
}

// canonicalMMIdentifierLen is the length of vLLM's canonical item digest in hex (32 bytes).
const canonicalMMIdentifierLen = 64

// IsCanonicalMMIdentifier reports whether id is a 64-character hex digest: vLLM's own item hashes
// (sha256/blake3 hex) and every identifier MMIdentifier assigns have this shape.
func IsCanonicalMMIdentifier(id string) bool {
	if len(id) != canonicalMMIdentifierLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

// MMIdentifierHash maps a multimodal item identifier to the u64 folded into block hashes:
//   - a canonical identifier (64 hex characters) → its first 8 bytes, big-endian (the first 16 hex
//     digits read as a number) — NVIDIA Dynamo's rule for vLLM's extra_keys, so both routers agree;
//   - any other string (a client's own uuid) → XXH3-64 with seed 0 of its UTF-8 bytes, the rule
//     SPEC §3 already uses for LoRA names.
func MMIdentifierHash(id string) uint64 {
	if IsCanonicalMMIdentifier(id) {
		var b [8]byte
		_, _ = hex.Decode(b[:], []byte(id[:16]))
		return binary.BigEndian.Uint64(b[:])
	}
	return xxh3.HashString(id)
}

// MMIdentifier is the identifier the router assigns to an image (and the mock engine derives when a
// request names none), so that engine and router agree by construction: the lowercase hex SHA-256 of
//   - "uuid:" + the client's uuid, when the content part carries one (the client's identity is kept,
//     in canonical form);
//   - else the decoded bytes of a base64 data URI ("data:<mime>;base64,<payload>"), so the same image
//     sent with another MIME type or padding is the same item;
//   - else the URL string itself (an http(s) URL names its content).
func MMIdentifier(url, clientUUID string) string {
	var sum [sha256.Size]byte
	switch {
	case clientUUID != "":
		sum = sha256.Sum256([]byte("uuid:" + clientUUID))
	default:
		if b, ok := dataURIBytes(url); ok {
			sum = sha256.Sum256(b)
		} else {
			sum = sha256.Sum256([]byte(url))
		}
	}
	return hex.EncodeToString(sum[:])
}

// dataURIBytes decodes a base64 data URI's payload (standard or URL alphabet, padded or not).
func dataURIBytes(url string) ([]byte, bool) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return nil, false
	}
	meta, payload, ok := strings.Cut(rest, ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return nil, false
	}
	payload = strings.TrimRight(payload, "=")
	if b, err := base64.RawStdEncoding.DecodeString(payload); err == nil {
		return b, true
	}
	if b, err := base64.RawURLEncoding.DecodeString(payload); err == nil {
		return b, true
	}
	return nil, false
}

// BlockMMHashes returns, per full block of a prompt of numTokens tokens, the hashes of the items whose
// placeholder span overlaps the block (vLLM's rule: start < block end and end > block start), in item
// order; nil when no item overlaps any full block. An item listed twice counts twice.
func BlockMMHashes(items []MMItem, numTokens, blockSize int) [][]uint64 {
	n := numTokens / blockSize
	var out [][]uint64
	for _, it := range items {
		if it.Length <= 0 || it.Offset < 0 {
			continue
		}
		first, last := it.Offset/blockSize, (it.Offset+it.Length-1)/blockSize
		for b := first; b <= last && b < n; b++ {
			if out == nil {
				out = make([][]uint64, n)
			}
			out[b] = append(out[b], it.Hash)
		}
	}
	return out
}

// LocalHashesMM is LocalHashes for a prompt with multimodal items: blocks that overlap an item hash
// with LocalMultimodal, the others exactly as LocalHashes (so a text-only prompt hashes as before).
func LocalHashesMM(dst []uint64, tokens []uint32, blockSize int, seed uint64, items []MMItem) []uint64 {
	mm := BlockMMHashes(items, len(tokens), blockSize)
	if mm == nil {
		return LocalHashes(dst, tokens, blockSize, seed)
	}
	dst = slices.Grow(dst, len(mm))
	for i, h := range mm {
		dst = append(dst, LocalMultimodal(tokens[i*blockSize:(i+1)*blockSize], h, seed))
	}
	return dst
}
