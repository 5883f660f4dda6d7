package zmqpub

// ring is the replay buffer: the last cap messages, oldest first. Not safe for concurrent use.
type ring struct {
	seqs     []uint64
	payloads [][]byte
	start    int // index of the oldest entry
	n        int
}

func newRing(capacity int) *ring {
	return &ring{seqs: make([]uint64, capacity), payloads: make([][]byte, capacity)}
}

func (r *ring) push(seq uint64, payload []byte) {
	c := len(r.seqs)
	if c == 0 {
		return
	}
	i := (r.start + r.n) % c
	if r.n == c {
		r.start = (r.start + 1) % c
	} else {
		r.n++
	}
	r.seqs[i], r.payloads[i] = seq, payload
}

// from returns the entries with seq >= start, oldest first. Payloads are shared, never mutated.
func (r *ring) from(start uint64) (seqs []uint64, payloads [][]byte) {
	c := len(r.seqs)
	for k := range r.n {
		i := (r.start + k) % c
		if r.seqs[i] >= start {
			seqs = append(seqs, r.seqs[i])
			payloads = append(payloads, r.payloads[i])
		}
	}
	return seqs, payloads
}
