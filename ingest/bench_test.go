package ingest

import (
	"testing"

	"github.com/kvrouter/kvrouter/ingest/vllmwire"
)

// BenchmarkDecodeNormalize measures the ingest's CPU cost per block: one message of 64 Stored events
// of 16 blocks of 16 tokens, with 32-byte hashes as recent vLLM sends them.
func BenchmarkDecodeNormalize(b *testing.B) {
	const events, blocks, bs = 64, 16, 16
	batch := vllmwire.Batch{TS: 1, HasDPRank: true}
	for e := range events {
		ev := vllmwire.Event{Kind: vllmwire.KindStored, BlockSize: bs, Medium: "GPU", HasParent: e > 0, Parent: uint64(e)}
		for k := range blocks {
			ev.BlockHashes = append(ev.BlockHashes, uint64(e*blocks+k))
			for t := range bs {
				ev.TokenIDs = append(ev.TokenIDs, uint32(100000+e*blocks*bs+k*bs+t))
			}
		}
		batch.Events = append(batch.Events, ev)
	}
	payload, err := vllmwire.Encode(batch, vllmwire.EncodeOptions{Hashes: vllmwire.HashBytes})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	for b.Loop() {
		d, err := vllmwire.Decode(payload)
		if err != nil {
			b.Fatal(err)
		}
		evs, _ := Normalize(nil, d, NormalizeParams{Epoch: "e", FirstEventID: 1, PoolBlockSize: bs})
		if len(evs) != events {
			b.Fatal(len(evs))
		}
	}
	b.ReportMetric(float64(events*blocks*b.N)/b.Elapsed().Seconds(), "blocks/s")
}
