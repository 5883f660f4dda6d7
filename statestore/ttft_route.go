package statestore

import (
	"encoding/binary"
	"math"
)

// cost_model ttft in the stores (SPEC §6.6): the cost of a candidate, the lease's features and the
// calibration at prefill_done. luascripts/route.lua (cost_of), lease.lua (prefill_done) and lib.lua
// (ttft_*) mirror this file operation by operation.
//
// Calibration is per rank (one engine's prefill queue and decode batch, like the loads it is fitted on),
// plus the pool's fit over every rank's samples, which a rank without samples predicts with
// (EffectiveTTFT). Memory keeps a rank's state on the rank and the pool's on the pool; Redis keeps both in
// the pool's hash `tc` (rank id → '>dddddd', "p" → the pool's). An absent entry is "not calibrated yet"
// (a rank: TTFTState's zero value; the pool: Init of the pool's reference), so pools written before it
// existed need no migration. A removed rank's state goes with it.

// TTFT reports whether the config costs candidates by predicted time to first token.
func (c *PoolConfig) TTFT() bool { return c.CostModel == CostModelTTFT }

// TTFTCalibration returns the pool's calibration: ttft_prefill_rate and ttft_decode_coeff as the
// reference (0 = DefaultTTFTPrefillRate, DefaultTTFTDecodeCoeff), every other setting its default.
func (c *PoolConfig) TTFTCalibration() TTFTCalibration {
	ref := TTFTCoeffs{PrefillRate: c.TTFTPrefillRate, DecodeCoeff: c.TTFTDecodeCoeff}
	if ref.PrefillRate == 0 {
		ref.PrefillRate = DefaultTTFTPrefillRate
	}
	if ref.DecodeCoeff == 0 {
		ref.DecodeCoeff = DefaultTTFTDecodeCoeff
	}
	return TTFTCalibration{Ref: ref}.WithDefaults()
}

// TTFTCandidate is a candidate's predicted TTFT terms: its booked load, and as its own prefill the tokens
// the decision would book (BookedPrefill: the prompt minus its device-tier overlap, soft blocks included;
// host and disk hits count as uncached, a conservative choice).
func TTFTCandidate(k TTFTCoeffs, isl int64, device, blockSize int, load Load) TTFTTerms {
	return PredictTTFT(k, load.PrefillTokens, BookedPrefill(isl, device, blockSize), load.DecodeBlocks)
}

// ttftFeatures are what a ttft decision records in its lease for the calibration at prefill_done.
type ttftFeatures struct {
	x1, x2 int64 // active_prefill_tokens + booked prefill, active_decode_blocks: the chosen rank's, before booking
	at     int64 // decision time, ms
}

// observation is the sample a prefill_done at now gives (measured = (now − decision) / 1000 s).
func (f ttftFeatures) observation(now int64) TTFTObservation {
	return TTFTObservation{PrefillTokens: float64(f.x1), DecodeBlocks: float64(f.x2), MeasuredS: float64(now-f.at) / 1000}
}

// ttftPoolState is the pool's fit (Init of the reference until a sample was taken).
func (p *memPool) ttftPoolState(cal TTFTCalibration) TTFTState {
	if p.ttftPool != nil {
		return *p.ttftPool
	}
	return cal.Init(cal.Ref)
}

// calibrate folds a ttft lease's first token at now into its rank's state and the pool's (once: the
// lease forgets its features). A rank removed since the decision calibrates nothing.
func (p *memPool) calibrate(l *memLease, now int64) {
	f := l.ttft
	l.ttft = nil
	if f == nil || !p.attached(l.rank) {
		return
	}
	cal := p.cfg.TTFTCalibration()
	w, pool, ok := cal.Observe(l.rank.ttft, p.ttftPoolState(cal), f.observation(now))
	if ok {
		l.rank.ttft, p.ttftPool = w, &pool
	}
}

// unpackTTFT decodes a calibration state as Redis stores it in tc (struct '>dddddd': six big-endian
// float64 in TTFTState's order); false when s is not one (an absent entry reads as the empty string).
func unpackTTFT(s string) (TTFTState, bool) {
	if len(s) != 48 {
		return TTFTState{}, false
	}
	var f [6]float64
	for i := range f {
		f[i] = math.Float64frombits(binary.BigEndian.Uint64([]byte(s[8*i : 8*i+8])))
	}
	return TTFTState{TTFTCoeffs: TTFTCoeffs{PrefillRate: f[0], DecodeCoeff: f[1]}, P11: f[2], P12: f[3], P22: f[4], Samples: f[5]}, true
}
