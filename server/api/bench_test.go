package api

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/kvrouter/kvrouter/core"
)

// BenchmarkRouteDecode measures one POST /v1/route through the API layer (decode, hash, memory store
// decision, encode) for a 1024-token prompt, without HTTP.
func BenchmarkRoute1024(b *testing.B) {
	a := newTestAPI(b)
	toks := make([]uint32, 1024)
	for i := range toks {
		toks[i] = uint32(i * 7919 % 128000)
	}
	tj, _ := json.Marshal(toks)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		body := fmt.Appendf(nil, `{"request_id":"r%d","token_ids":%s}`, i, tj)
		r := a.Do(ctx, Request{Method: "POST", RawPath: "/v1/route", Body: body})
		if r.Status != 200 {
			b.Fatalf("%d %s", r.Status, r.Body)
		}
		a.Do(ctx, Request{Method: "POST", RawPath: fmt.Sprintf("/v1/requests/r%d/done", i)})
	}
}

func benchDecode(b *testing.B, v func() any) {
	toks := make([]uint32, 1024)
	for i := range toks {
		toks[i] = uint32(i * 7919 % 128000)
	}
	tj, _ := json.Marshal(toks)
	body := fmt.Appendf(nil, `{"request_id":"r","token_ids":%s}`, tj)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := decodeStrict(body, "x", v()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeTokens compares the route body decoder with plain encoding/json (1,024 token ids).
func BenchmarkDecodeTokens(b *testing.B) {
	b.Run("routeBody", func(b *testing.B) { benchDecode(b, func() any { return &routeBody{} }) })
	b.Run("encoding_json", func(b *testing.B) { benchDecode(b, func() any { return &core.RouteInput{} }) })
}
