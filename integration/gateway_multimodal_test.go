package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestGatewayMultimodal (issue 14, must show): a real `kvrouter serve` gateway in front of two
// `kvrouter mock --multimodal` engines, their KV events ingested over ZMQ. Two chat requests with the
// same text and different images are different prompts: once image A is cached on one worker and
// image B on the other, each image's request goes back to its own worker with its whole prompt
// matched, where the text prefix alone would match on both. The gateway assigns each image's uuid,
// the engine names the image by it in BlockStored extra_keys, and the ingest and the gateway fold the
// same identity into the same blocks.
func TestGatewayMultimodal(t *testing.T) {
	requireIntegration(t)
	_, engines := startMock(t, 2, "--multimodal", "--image-tokens", "40")
	path := filepath.Join(t.TempDir(), "serve.yaml")
	cfg := "pools:\n  default:\n    block_size: 16\n    models: [" + gwModel + "]\n    tokenize: engine\n    image_token_id: 99\n    lease_ttl_ms: 600000\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	gw := startServe(t, append([]string{"--store", "memory", "--config", path}, ingestFlags(engines)...)...).URL
	waitFor(t, 60*time.Second, "the mock engines registered", func() string {
		if n := len(gwWorkers(t, gw)); n != 2 {
			return fmt.Sprintf("%d workers registered, want 2", n)
		}
		return ""
	})

	// 30 words of text (user: + 30 words = 31 tokens), then the image (start
	// token, 40 placeholders, end token), then "assistant:": 74 tokens, 4 full blocks.
	words := make([]string, 30)
	for i := range words {
		words[i] = "word" + strconv.Itoa(i)
	}
	text := strings.Join(words, " ")
	imageA := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("pixels of image A"))
	imageB := "data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("pixels of image B"))
	const fullBlocks = 4 // blocks 0–1 are text (block 1 ends with the start token), 2–3 image A or B

	busyWorker := "" // a worker holding the occupy() load: not waited for
	send := func(image string) (worker string, overlap, cached int) {
		t.Helper()
		body := map[string]any{"model": gwModel, "max_tokens": 2, "messages": []any{map[string]any{"role": "user",
			"content": []any{map[string]any{"type": "text", "text": text},
				map[string]any{"type": "image_url", "image_url": map[string]any{"url": image}}}}}}
		raw, _ := json.Marshal(body)
		resp, err := httpClient.Post(gw+"/v1/chat/completions", "application/json", bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if out.Usage.PromptTokens != 74 || resp.Header.Get("X-Kvrouter-Overlap") != "" {
			t.Fatalf("prompt tokens %d, headers %v: want 74 known tokens", out.Usage.PromptTokens, resp.Header)
		}
		worker = resp.Header.Get("X-Kvrouter-Worker")
		overlap, _ = strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
		waitFor(t, 20*time.Second, "loads back to 0 after a multimodal chat", func() string { return loadsDescription(t, gw, busyWorker) })
		waitFor(t, 30*time.Second, "the worker's blocks indexed", func() string {
			if got := workerBlocks(t, gw)[worker]; got < fullBlocks {
				return fmt.Sprintf("%s: %d blocks indexed", worker, got)
			}
			return ""
		})
		return worker, overlap, out.Usage.PromptTokensDetails.CachedTokens
	}

	// Cache A on one worker, then B on the other (A's worker is made busy for that one request, so B's
	// placement does not depend on a tie-break).
	wa, overlap, _ := send(imageA)
	if overlap != 0 {
		t.Fatalf("first request: overlap %d on an empty index", overlap)
	}
	busy, busyWorker := occupy(t, gw, wa), wa
	wb, overlap, _ := send(imageB)
	releaseReq(t, gw, busy)
	busyWorker = ""
	if wb == wa {
		t.Fatalf("image B went to %s, which was made busy", wb)
	}
	if overlap != 0 {
		t.Fatalf("image B: overlap %d blocks on the empty %s", overlap, wb)
	}
	// Now both workers hold the 2 text blocks, and each image's blocks are on one worker only: each
	// image goes back to its own worker with its whole prompt matched, and the engine hits.
	for round := 0; round < 2; round++ {
		for _, c := range []struct{ image, want, name string }{{imageA, wa, "A"}, {imageB, wb, "B"}} {
			w, overlap, cached := send(c.image)
			t.Logf("image %s: worker %s, overlap %d blocks, cached_tokens %d", c.name, w, overlap, cached)
			if w != c.want || overlap != fullBlocks || cached < fullBlocks*16 {
				t.Fatalf("image %s went to %s with overlap %d and %d cached tokens; want %s, %d blocks, >= %d tokens",
					c.name, w, overlap, cached, c.want, fullBlocks, fullBlocks*16)
			}
		}
	}
}
