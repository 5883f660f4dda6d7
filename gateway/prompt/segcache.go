package prompt

import (
	"github.com/zeebo/xxh3"

	"github.com/kvrouter/kvrouter/tokenizer"
)

// segmentOverhead is the cost, in tokens, charged per cached segment on top of its ids: the map
// entry, list element and key (~100 bytes) expressed in 4-byte token units.
const segmentOverhead = 24

// segmentKey names a segment's encoding: the tokenizer (its loaded entry) and the 128-bit XXH3
// digest of the segment's text. Keys hold no text, so the cache's memory is its ids.
type segmentKey struct {
	tok    *tokenizerEntry
	digest xxh3.Uint128
}

// encodeCached encodes text as tok.Encode does (no BOS), reusing the ids of segments seen before.
// Added tokens written in the text (<|eot_id|>, <|im_start|>, ...) cut a rendered chat into
// segments that BPE encodes independently (tokenizer.Segmenter), so a conversation's turn N
// re-encodes only what turn N-1 did not contain. The result is exactly tok.Encode(text), which
// TestCachedEqualsUncached checks on random conversations.
func encodeCached(cache *lru[segmentKey, []uint32], entry *tokenizerEntry, text string, dst []uint32) ([]uint32, error) {
	tok := entry.tok
	err := tok.Segments(text, func(part string, added bool, id uint32) error {
		if added {
			dst = append(dst, id)
			return nil
		}
		key := segmentKey{tok: entry, digest: xxh3.HashString128(part)}
		if ids, ok := cache.get(key); ok {
			dst = append(dst, ids...)
			return nil
		}
		start := len(dst)
		var err error
		if dst, err = tok.AppendSegment(dst, part); err != nil {
			return err
		}
		ids := append([]uint32(nil), dst[start:]...)
		cache.put(key, ids, int64(len(ids))+segmentOverhead)
		return nil
	})
	return dst, err
}

// encodeUncached is the reference path: the tokenizer's own Encode.
func encodeUncached(tok tokenizer.Segmenter, text string, dst []uint32) ([]uint32, error) {
	ids, err := tok.Encode(text)
	if err != nil {
		return nil, err
	}
	return append(dst, ids...), nil
}
