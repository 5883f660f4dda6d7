package statestore

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// setHolders is a holderSet over explicit sets: held[i] lists the slots holding position i.
type setHolders struct{ held [][]slotID }

func (h setHolders) contains(i int, s slotID) bool { return slices.Contains(h.held[i], s) }
func (h setHolders) at(i int) []slotID             { return h.held[i] }

// perSlotJumpDepths is the jump search with one binary search per slot (the algorithm before the
// grouped search, and route.lua's jump_depths): the reference the grouped search must equal.
func perSlotJumpDepths(h holderSet, d int) map[slotID]int {
	out := map[slotID]int{}
	if d == 0 {
		return out
	}
	active := slices.Clone(h.at(0))
	lo, step := 0, JumpStride
	for len(active) > 0 && lo < d-1 {
		hi := min(lo+step, d-1)
		var keep []slotID
		for _, s := range active {
			if h.contains(hi, s) {
				keep = append(keep, s)
				continue
			}
			l, r := lo, hi
			for r-l > 1 {
				m := (l + r) / 2
				if h.contains(m, s) {
					l = m
				} else {
					r = m
				}
			}
			out[s] = l + 1
		}
		active, lo, step = keep, hi, step*2
	}
	for _, s := range active {
		out[s] = lo + 1
	}
	return out
}

// The grouped binary search gives every slot exactly the depth its own binary search gives, on any
// holder sets, prefix-closed or not (on sets that are not, the depth is whatever boundary the probes
// bracket, and both must bracket the same one).
func TestJumpDepthsGroupedMatchesPerSlot(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		d := rapid.IntRange(0, 600).Draw(t, "d")
		slots := rapid.IntRange(1, 12).Draw(t, "slots")
		closed := rapid.Bool().Draw(t, "prefix_closed")
		h := setHolders{held: make([][]slotID, d)}
		for s := 1; s <= slots; s++ {
			depth := rapid.IntRange(0, d).Draw(t, "depth")
			for i := 0; i < d; i++ {
				if i < depth || (!closed && rapid.IntRange(0, 9).Draw(t, "noise") == 0) {
					h.held[i] = append(h.held[i], slotID(s))
				}
			}
		}
		want := perSlotJumpDepths(h, d)
		got := map[slotID]int{}
		for _, sd := range jumpDepths(h, d, nil, &jumpScratch{}) {
			if _, dup := got[sd.slot]; dup {
				t.Fatalf("slot %d settled twice", sd.slot)
			}
			got[sd.slot] = sd.depth
		}
		if len(got) != len(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
		for s, w := range want {
			if got[s] != w {
				t.Fatalf("slot %d: depth %d, want %d (all: got %v want %v)", s, got[s], w, got, want)
			}
		}
	})
}
