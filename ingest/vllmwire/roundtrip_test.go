package vllmwire

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// genEvent draws an event carrying exactly the fields its kind has on the wire, with empty lists as
// nil (what the decoder returns for an empty list).
func genEvent(t *rapid.T) Event {
	nilIfEmpty64 := func(s []uint64) []uint64 {
		if len(s) == 0 {
			return nil
		}
		return s
	}
	media := rapid.SampledFrom([]string{"", "GPU", "CPU", "CPU_PINNED", "DISK", "NVME", "CPU_TIER1", "CPU_TIER2"})
	switch rapid.IntRange(0, 2).Draw(t, "kind") {
	case 0:
		ev := Event{Kind: KindStored}
		ev.BlockHashes = nilIfEmpty64(rapid.SliceOfN(rapid.Uint64(), 0, 8).Draw(t, "hashes"))
		ev.HasParent = rapid.Bool().Draw(t, "hasParent")
		if ev.HasParent {
			ev.Parent = rapid.Uint64().Draw(t, "parent")
		}
		toks := rapid.SliceOfN(rapid.Uint32(), 0, 64).Draw(t, "tokens")
		if len(toks) > 0 {
			ev.TokenIDs = toks
		}
		ev.BlockSize = rapid.IntRange(0, MaxBlockSize).Draw(t, "blockSize")
		ev.HasLoRAID = rapid.Bool().Draw(t, "hasLoRAID")
		if ev.HasLoRAID {
			ev.LoRAID = rapid.Int64().Draw(t, "loraID")
		}
		ev.Medium = media.Draw(t, "medium")
		ev.LoRAName = rapid.StringN(0, 40, 40).Draw(t, "loraName")
		if rapid.Bool().Draw(t, "hasExtraKeys") {
			ev.ExtraKeys = make([][]ExtraKey, rapid.IntRange(1, 4).Draw(t, "extraBlocks"))
			for i := range ev.ExtraKeys {
				for range rapid.IntRange(0, 3).Draw(t, "extraKeys") {
					k := ExtraKey{Identifier: rapid.StringN(0, 70, 70).Draw(t, "identifier"), Pair: rapid.Bool().Draw(t, "pair")}
					if k.Pair {
						k.Offset = rapid.Int64().Draw(t, "offset")
					}
					ev.ExtraKeys[i] = append(ev.ExtraKeys[i], k)
				}
			}
		}
		return ev
	case 1:
		return Event{
			Kind:        KindRemoved,
			BlockHashes: nilIfEmpty64(rapid.SliceOfN(rapid.Uint64(), 0, 8).Draw(t, "hashes")),
			Medium:      media.Draw(t, "medium"),
		}
	}
	return Event{Kind: KindCleared}
}

// TestRoundTrip: Decode(Encode(b)) == b for every form and hash encoding.
func TestRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		b := Batch{TS: rapid.Float64().Filter(func(f float64) bool { return !math.IsNaN(f) }).Draw(t, "ts")}
		b.HasDPRank = rapid.Bool().Draw(t, "hasDP")
		if b.HasDPRank {
			b.DPRank = rapid.IntRange(0, MaxDPRank).Draw(t, "dp")
		}
		b.Events = rapid.SliceOfN(rapid.Custom(genEvent), 0, 20).Draw(t, "events")
		opts := EncodeOptions{
			Form:   Form(rapid.IntRange(0, 1).Draw(t, "form")),
			Hashes: HashEncoding(rapid.IntRange(0, 2).Draw(t, "hashes")),
		}
		data, err := Encode(b, opts)
		if err != nil {
			t.Fatal(err)
		}
		got, err := Decode(data)
		if err != nil {
			t.Fatalf("decode: %v (payload %x)", err, data)
		}
		if len(b.Events) == 0 {
			b.Events = []Event{} // an empty list decodes as an empty, non-nil slice
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("round trip (%+v)\n got %+v\nwant %+v", opts, got, b)
		}
	})
}

func FuzzDecode(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.msgpack"))
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrLimit) {
				t.Fatalf("error wraps neither sentinel: %v", err)
			}
			return
		}
		// Whatever decodes must survive a re-encode unchanged (unknown events cannot be encoded).
		known := b
		known.Events = nil
		for _, ev := range b.Events {
			if ev.Kind != KindUnknown {
				known.Events = append(known.Events, ev)
			}
		}
		if known.Events == nil {
			known.Events = []Event{}
		}
		for _, form := range []Form{FormArray, FormMap} {
			data2, err := Encode(known, EncodeOptions{Form: form})
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			again, err := Decode(data2)
			if err != nil {
				t.Fatalf("decode of re-encoded batch: %v", err)
			}
			if math.Float64bits(again.TS) != math.Float64bits(known.TS) {
				t.Fatalf("ts changed: %v -> %v", known.TS, again.TS)
			}
			again.TS, known.TS = 0, 0
			if !reflect.DeepEqual(again, known) {
				t.Fatalf("re-encode changed the batch\n got %+v\nwant %+v", again, known)
			}
			known.TS = b.TS
		}
	})
}
