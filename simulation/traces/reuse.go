package traces

import "fmt"

// ReuseBound measures how much of a trace's prefill an infinite prefix cache (one cache seeing every
// request, never evicting) could skip, at a given engine block size: the fraction of block references
// that were referenced before (blockHitFraction) and the fraction of prompt tokens in those blocks
// (tokenHitFraction). It bounds the hit rate any routing policy can reach.
//
// Every prompt is cut into ceil(InputTokens / engineBlock) block references, a trailing partial block
// included: the trace's published figures count it that way (36.64 % of 512-token blocks and 37.4 % of
// tokens for the Mooncake conversation trace; real engines never cache the partial block, so counting
// only full blocks gives a slightly higher fraction, 38.19 % there).
//
// Algorithm: trace ids are prefix ids (an equal id means an equal prefix up to the end of its block),
// so the prefix that ends inside trace block t is named by (HashIDs[t], end offset in the block), and
// block boundaries fall at the same absolute positions in every request. Hence a full engine block
// ending at offset e in trace block id was seen before iff an earlier reference of id reached e: one
// map of id → longest length seen, O(1) per trace block; the rare partial engine blocks are looked
// up by (id, length). Requests without ids contribute misses. It panics if engineBlock does not
// divide 512 (a caller bug; the traces' prefix structure only survives at those sizes).
func ReuseBound(reqs []Request, engineBlock int) (blockHitFraction, tokenHitFraction float64) {
	if engineBlock < 1 || TraceBlockTokens%engineBlock != 0 {
		panic(fmt.Sprintf("traces: ReuseBound: engine block size %d must divide %d", engineBlock, TraceBlockTokens))
	}
	type partialKey struct {
		id  uint64
		len int
	}
	longest := make(map[uint64]int)          // id → longest prefix of its block referenced so far, tokens
	partial := make(map[partialKey]struct{}) // trailing partial engine blocks seen: (id, block length)
	var refs, hits, tokens, hitTokens int64
	for _, r := range reqs {
		n := r.InputTokens
		if len(r.HashIDs) == 0 {
			refs += int64((n + engineBlock - 1) / engineBlock)
			tokens += int64(n)
			continue
		}
		for t, id := range r.HashIDs {
			l := min(TraceBlockTokens, n-t*TraceBlockTokens) // tokens of this trace block in the prompt
			if l <= 0 {
				break
			}
			full := l / engineBlock
			seen := longest[id]
			h := min(full, seen/engineBlock)
			refs += int64(full)
			hits += int64(h)
			tokens += int64(l)
			hitTokens += int64(h * engineBlock)
			if rest := l % engineBlock; rest != 0 {
				refs++
				k := partialKey{id, l}
				if _, ok := partial[k]; ok {
					hits++
					hitTokens += int64(rest)
				} else {
					partial[k] = struct{}{}
				}
			}
			if l > seen {
				longest[id] = l
			}
		}
		if rest := n - TraceBlockTokens*len(r.HashIDs); rest > 0 { // prompt longer than its ids: misses
			refs += int64((rest + engineBlock - 1) / engineBlock)
			tokens += int64(rest)
		}
	}
	if refs == 0 {
		return 0, 0
	}
	return float64(hits) / float64(refs), float64(hitTokens) / float64(tokens)
}
