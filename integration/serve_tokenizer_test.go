package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/tokenizer"
	"github.com/kvrouter/kvrouter/tokenizer/tokenizertest"
)

// TestServeTokenizer: a text prompt is tokenized by --tokenizer exactly like the engine's ids, so it
// matches the blocks a worker announced with token ids.
func TestServeTokenizer(t *testing.T) {
	requireIntegration(t)
	// From the Go module cache, downloaded there when missing; skips only offline outside CI (under CI
	// an unavailable module fails the test, naming the go mod download command).
	path := tokenizertest.Path(t, "Meta-Llama-3-8B-Instruct.json")
	tok, err := tokenizer.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	prompt := "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant. Answer in one sentence, citing sources where you can.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhy is the sky blue?<|eot_id|>"
	ids, err := tok.Encode(prompt)
	if err != nil {
		t.Fatal(err)
	}
	const bs = 4
	full := len(ids) / bs * bs
	if full < 2*bs {
		t.Fatalf("prompt too short: %d tokens", len(ids))
	}
	p := startServe(t, "--tokenizer", path, "--block-size", fmt.Sprint(bs))
	for _, w := range []string{"w0", "w1"} {
		p.must(t, 200, "PUT", "/v1/workers/"+w, `{"url":"u"}`)
	}
	tj, _ := json.Marshal(ids[:full])
	blocks := make([]string, full/bs)
	for i := range blocks {
		blocks[i] = fmt.Sprintf(`{"block_hash":%d}`, 1000+i)
	}
	p.must(t, 200, "POST", "/v1/events", fmt.Sprintf(`[{"worker_id":"w1","event":{"event_id":1,"data":{"stored":{"parent_hash":null,"token_ids":%s,"block_size":%d,"blocks":[%s]}}}}]`,
		tj, bs, strings.Join(blocks, ",")))
	pj, _ := json.Marshal(prompt)
	d := decodeDecision(t, p.must(t, 200, "POST", "/v1/route", `{"request_id":"t1","prompt":`+string(pj)+`,"random":0}`))
	if d.WorkerID != "w1" || d.OverlapBlocks != full/bs || d.RequiredBlocks != int64((len(ids)+bs-1)/bs) {
		t.Errorf("prompt decision %+v; want w1 with %d overlap blocks of %d tokens", d, full/bs, len(ids))
	}
	// The same prompt as token ids decides the same (once t1's load is released).
	p.must(t, 200, "POST", "/v1/requests/t1/done", "")
	ij, _ := json.Marshal(ids)
	d2 := decodeDecision(t, p.must(t, 200, "POST", "/v1/route", `{"request_id":"t2","token_ids":`+string(ij)+`,"random":0}`))
	if d2.WorkerID != d.WorkerID || d2.OverlapBlocks != d.OverlapBlocks || d2.RequiredBlocks != d.RequiredBlocks {
		t.Errorf("token ids %+v, prompt %+v", d2, d)
	}
	// A prompt and token ids together are a 400.
	p.must(t, 400, "POST", "/v1/route", `{"prompt":"hi","token_ids":[1]}`)
}
