package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/kvrouter/kvrouter/internal/testnet"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/statestore"
)

// End-to-end tests of the OpenAI-compatible gateway (SPEC §7.2): the official Go client streams through
// real `kvrouter serve` processes from real `kvrouter mock` engines, on the embedded store and on Redis
// with two gateways. No timing assertions: every wait is for a condition with a generous deadline.

const gwModel = "mock-model"

// gatewayConfig writes serve's YAML configuration: the default pool serves the mock's model and learns
// text and chat prompts' tokens from the engines' POST /tokenize (the mock's tokenizer); leases last
// 10 minutes (so a freed load proves done, not expiry) and so does an unhealthy worker's back-off (so a
// worker marked unhealthy stays skipped for the whole test).
func gatewayConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "serve.yaml")
	cfg := "pools:\n  default:\n    block_size: 16\n    models: [" + gwModel + "]\n    tokenize: engine\n    lease_ttl_ms: 600000\n    unhealthy_backoff_ms: 600000\n"
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// gwClient is the official OpenAI Go client pointed at a gateway (its own retries off: the gateway's are
// under test).
func gwClient(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0),
		option.WithRequestTimeout(2*time.Minute))
}

// gwWorkers lists the default pool's workers through a gateway's decision API.
func gwWorkers(t *testing.T, base string) []statestore.WorkerInfo {
	t.Helper()
	var ws struct {
		Workers []statestore.WorkerInfo `json:"workers"`
	}
	if err := httpJSON("GET", base+"/v1/workers", nil, &ws); err != nil {
		t.Fatal(err)
	}
	return ws.Workers
}

// loadsDescription is "" when no worker holds any load, else what is still held.
func loadsDescription(t *testing.T, base string, except ...string) string {
	var held []string
	for _, w := range gwWorkers(t, base) {
		for _, r := range w.Ranks {
			if r.ActiveRequests != 0 || r.ActivePrefillTokens != 0 || r.ActiveDecodeBlocks != 0 {
				if !contains(except, w.WorkerID) {
					held = append(held, fmt.Sprintf("%s: %d requests, %d prefill tokens, %d decode blocks",
						w.WorkerID, r.ActiveRequests, r.ActivePrefillTokens, r.ActiveDecodeBlocks))
				}
			}
		}
	}
	return strings.Join(held, "; ")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// requireLoadsZero waits until every worker's load is exactly 0 again.
func requireLoadsZero(t *testing.T, base, after string) {
	t.Helper()
	waitFor(t, 20*time.Second, "loads back to 0 after "+after, func() string { return loadsDescription(t, base) })
}

// metricValue sums a Prometheus counter's samples whose labels contain every given label pair.
func metricValue(t *testing.T, base, name string, labels ...string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// occupy books a large request pinned on a worker through the decision API, so routing prefers the
// others; it returns the request id to release with done.
func occupy(t *testing.T, base, worker string) string {
	t.Helper()
	id := "occupy-" + worker + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	body := map[string]any{"request_id": id, "pinned_worker": worker, "isl": 200000}
	if err := httpJSON("POST", base+"/v1/route", body, nil); err != nil {
		t.Fatal(err)
	}
	return id
}

func releaseReq(t *testing.T, base, id string) {
	t.Helper()
	if err := httpJSON("POST", base+"/v1/requests/"+id+"/done", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestGatewayEmbedded(t *testing.T) {
	requireIntegration(t)
	_, engines := startMock(t, 2)
	args := append([]string{"--store", "memory", "--config", gatewayConfig(t)}, ingestFlags(engines)...)
	gw := startServe(t, args...)
	runGatewayScenario(t, []string{gw.URL}, engines)
}

func TestGatewayRedisTwoGateways(t *testing.T) {
	requireIntegration(t)
	r := testredis.Start(t)
	_, engines := startMock(t, 2)
	cfg := gatewayConfig(t)
	a := startServe(t, "--store", r.URL(), "--config", cfg)
	startIngest(t, append([]string{"--store", r.URL()}, ingestFlags(engines)...)...)
	b := startServe(t, "--store", r.URL(), "--config", cfg)
	runGatewayScenario(t, []string{a.URL, b.URL}, engines)
	t.Run("UnhealthyWorkerSkippedBySecondGateway", func(t *testing.T) { unhealthySkipped(t, a.URL, b.URL, engines) })
	t.Run("DonesCarriedByRoutes", func(t *testing.T) { donesCarried(t, r.URL(), cfg) })
}

// donesCarried: a gateway with a long --release-delay, its requests sequential through the OpenAI client,
// carries a finished request's done on its next route (the counter), and its own listing shows every load
// released (the pending ones are sent before it reads). A second of delay leaves no doubt that a route
// comes first, however slow the machine: 20 requests, one carried release is enough to pass.
func donesCarried(t *testing.T, store, cfg string) {
	g := startServe(t, "--store", store, "--config", cfg, "--release-delay", "1s")
	c := gwClient(g.URL)
	for i := range 20 {
		_, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
			Model:     openai.CompletionNewParamsModel(gwModel),
			Prompt:    openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: []int64{int64(40000 + i), 1, 2, 3, 4, 5, 6, 7}},
			MaxTokens: openai.Int(2),
		})
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if n := metricValue(t, g.URL, "kvrouter_store_carried_releases_total"); n < 1 {
		t.Fatalf("kvrouter_store_carried_releases_total = %v after 20 sequential requests with a 1 s release delay", n)
	}
	if held := loadsDescription(t, g.URL); held != "" {
		t.Fatalf("the gateway's own listing right after its requests: %s (its pending releases must be sent first)", held)
	}
}

// runGatewayScenario runs the gateway checks; with two gateways, turns alternate between them.
func runGatewayScenario(t *testing.T, gws []string, engines []mockEngine) {
	admin := gws[0]
	waitFor(t, 60*time.Second, "the mock engines registered", func() string {
		if n := len(gwWorkers(t, admin)); n != len(engines) {
			return fmt.Sprintf("%d workers registered, want %d", n, len(engines))
		}
		return ""
	})
	t.Run("Models", func(t *testing.T) {
		for _, g := range gws {
			c := gwClient(g)
			page, err := c.Models.List(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Data) != 1 || page.Data[0].ID != gwModel {
				t.Fatalf("models %+v", page.Data)
			}
		}
	})
	t.Run("ChatStream", func(t *testing.T) { chatStream(t, gws) })
	t.Run("CompletionConversation", func(t *testing.T) { conversation(t, gws, admin, completionTurns()) })
	t.Run("ChatConversation", func(t *testing.T) { conversation(t, gws, admin, chatTurns()) })
	t.Run("ClientDisconnect", func(t *testing.T) { clientDisconnect(t, gws[len(gws)-1], admin) })
	t.Run("RefusedEngineRetried", func(t *testing.T) { refusedEngineRetried(t, gws[0], admin) })
	t.Run("MidStreamFailure", func(t *testing.T) { midStreamFailure(t, gws[len(gws)-1], admin, engines) })
}

func chatStream(t *testing.T, gws []string) {
	for _, g := range gws {
		c := gwClient(g)
		var resp *http.Response
		stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model:     gwModel,
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("say something about the weather")},
			MaxTokens: openai.Int(8),
		}, option.WithResponseInto(&resp))
		var text strings.Builder
		chunks := 0
		for stream.Next() {
			ch := stream.Current()
			if len(ch.Choices) > 0 {
				text.WriteString(ch.Choices[0].Delta.Content)
				chunks++
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if chunks != 8 || len(strings.Fields(text.String())) != 8 {
			t.Fatalf("%d chunks, text %q: want 8 tokens", chunks, text.String())
		}
		if resp == nil || resp.Header.Get("X-Kvrouter-Worker") == "" || resp.Header.Get("X-Kvrouter-Request-Id") == "" ||
			resp.Header.Get("X-Kvrouter-Overlap") != "" {
			t.Fatalf("gateway headers missing: %v", resp)
		}
		requireLoadsZero(t, g, "a chat stream")

		// Non-streaming chat through the same client.
		cc, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: gwModel, Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello")}, MaxTokens: openai.Int(3),
		})
		if err != nil || len(cc.Choices) != 1 || len(strings.Fields(cc.Choices[0].Message.Content)) != 3 {
			t.Fatalf("chat: %v %+v", err, cc)
		}
		requireLoadsZero(t, g, "a chat completion")

		// An unknown model is OpenAI's 404.
		_, err = c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: "no-such-model", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "model_not_found" {
			t.Fatalf("unknown model: %v", err)
		}
	}
}

// turnFunc sends turn number turn (1-based) of a conversation through a client and returns the answer's
// response (headers), the engine's cached_tokens and prompt_tokens.
type turnFunc func(t *testing.T, c openai.Client, turn int) (resp *http.Response, cached, promptTokens int64)

// conversation: six turns, each prompt the previous one plus new tokens, stay on one worker with growing
// overlap (the gateway's header) and growing cached_tokens (the engine's usage).
func conversation(t *testing.T, gws []string, admin string, send turnFunc) {
	worker, lastOverlap, lastCached := "", -1, int64(-1)
	for turn := 1; turn <= 6; turn++ {
		g := gws[turn%len(gws)]
		resp, cached, promptTokens := send(t, gwClient(g), turn)
		w := resp.Header.Get("X-Kvrouter-Worker")
		overlap, err := strconv.Atoi(resp.Header.Get("X-Kvrouter-Overlap-Blocks"))
		if err != nil || resp.Header.Get("X-Kvrouter-Overlap") != "" {
			t.Fatalf("turn %d: overlap headers %v (want known tokens)", turn, resp.Header)
		}
		t.Logf("turn %d via %s: worker %s, %d prompt tokens, overlap %d blocks, cached_tokens %d", turn, g, w, promptTokens, overlap, cached)
		if turn == 1 {
			worker = w
		} else {
			if w != worker {
				t.Fatalf("turn %d went to %s, the conversation is on %s", turn, w, worker)
			}
			if overlap <= lastOverlap || cached <= lastCached {
				t.Fatalf("turn %d: overlap %d (before %d), cached_tokens %d (before %d): want both growing", turn, overlap, lastOverlap, cached, lastCached)
			}
		}
		lastOverlap, lastCached = overlap, cached
		requireLoadsZero(t, admin, fmt.Sprintf("turn %d", turn))
		// The next turn routes on this turn's blocks: wait until the engine's KV events reached the index.
		want := promptTokens / 16
		waitFor(t, 30*time.Second, "the router's index holds the turn's blocks", func() string {
			if got := workerBlocks(t, admin)[worker]; got < want {
				return fmt.Sprintf("%s: %d blocks indexed, want >= %d", worker, got, want)
			}
			return ""
		})
	}
}

// completionTurns: streamed completions whose token-array prompt grows by 40 tokens a turn.
func completionTurns() turnFunc {
	var prompt []int64
	for i := 0; i < 70; i++ {
		prompt = append(prompt, int64(20000+i))
	}
	return func(t *testing.T, c openai.Client, turn int) (*http.Response, int64, int64) {
		if turn > 1 {
			for i := 0; i < 40; i++ {
				prompt = append(prompt, int64(30000+turn*100+i))
			}
		}
		var resp *http.Response
		stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
			Model:         openai.CompletionNewParamsModel(gwModel),
			Prompt:        openai.CompletionNewParamsPromptUnion{OfArrayOfTokens: prompt},
			MaxTokens:     openai.Int(4),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithResponseInto(&resp))
		var cached, promptTokens int64 = -1, 0
		for stream.Next() {
			if u := stream.Current().Usage; u.PromptTokens > 0 {
				cached, promptTokens = u.PromptTokensDetails.CachedTokens, u.PromptTokens
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		return resp, cached, promptTokens
	}
}

// chatTurns: a streamed chat whose messages grow by the assistant's answer and a new user message a turn;
// the gateway learns the tokens from the engine's POST /tokenize (the pool's tokenize: engine).
func chatTurns() turnFunc {
	var msgs []openai.ChatCompletionMessageParamUnion
	return func(t *testing.T, c openai.Client, turn int) (*http.Response, int64, int64) {
		words := make([]string, 40)
		for i := range words {
			words[i] = fmt.Sprintf("w%d_%d", turn, i)
		}
		msgs = append(msgs, openai.UserMessage(strings.Join(words, " ")))
		var resp *http.Response
		stream := c.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
			Model: gwModel, Messages: msgs, MaxTokens: openai.Int(6),
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		}, option.WithResponseInto(&resp))
		var answer strings.Builder
		var cached, promptTokens int64 = -1, 0
		for stream.Next() {
			ch := stream.Current()
			if len(ch.Choices) > 0 {
				answer.WriteString(ch.Choices[0].Delta.Content)
			}
			if ch.Usage.PromptTokens > 0 {
				cached, promptTokens = ch.Usage.PromptTokensDetails.CachedTokens, ch.Usage.PromptTokens
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		msgs = append(msgs, openai.AssistantMessage(answer.String()))
		return resp, cached, promptTokens
	}
}

// clientDisconnect: a client that leaves mid-stream frees its load at once — long before the 10-minute
// lease would expire — and the gateway counts it (code 499).
func clientDisconnect(t *testing.T, g, admin string) {
	before := metricValue(t, g, "kvrouter_gateway_requests_total", `code="499"`)
	c := gwClient(g)
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(gwModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("tell me a very long story")},
		MaxTokens: openai.Int(600),
	})
	if !stream.Next() {
		t.Fatalf("no first chunk: %v", stream.Err())
	}
	if loadsDescription(t, admin) == "" {
		t.Fatal("no load booked while the stream runs")
	}
	stream.Close() // the client leaves after the first token
	requireLoadsZero(t, admin, "the client disconnected")
	waitFor(t, 20*time.Second, "the gateway counted the disconnect", func() string {
		if metricValue(t, g, "kvrouter_gateway_requests_total", `code="499"`) <= before {
			return "no request counted with code 499"
		}
		return ""
	})
}

// refusedEngineRetried: a registered worker whose URL refuses connections is the best choice (the live
// engines are busy); the gateway retries on the next-best worker and the client sees success.
func refusedEngineRetried(t *testing.T, g, admin string) {
	if err := httpJSON("PUT", admin+"/v1/workers/dead", map[string]any{"url": testnet.RefusedURL(t), "kv_events": false}, nil); err != nil {
		t.Fatal(err)
	}
	var busy []string
	for _, w := range gwWorkers(t, admin) {
		if w.WorkerID != "dead" {
			busy = append(busy, occupy(t, admin, w.WorkerID))
		}
	}
	before := metricValue(t, g, "kvrouter_gateway_retries_total", `reason="connect"`)
	c := gwClient(g)
	var resp *http.Response
	out, err := c.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(gwModel), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello")},
		MaxTokens: openai.Int(2)}, option.WithResponseInto(&resp))
	if err != nil || len(out.Choices) != 1 {
		t.Fatalf("the client saw a failure: %v", err)
	}
	if w := resp.Header.Get("X-Kvrouter-Worker"); w == "dead" || w == "" {
		t.Fatalf("answered by %q", w)
	}
	if got := metricValue(t, g, "kvrouter_gateway_retries_total", `reason="connect"`); got != before+1 {
		t.Fatalf("connect retries %v → %v, want one retry", before, got)
	}
	for _, id := range busy {
		releaseReq(t, admin, id)
	}
	requireLoadsZero(t, admin, "a retried request")
}

// midStreamFailure: an engine dying after the first chunk gives the client an error and frees the load.
func midStreamFailure(t *testing.T, g, admin string, engines []mockEngine) {
	setFaults := func(f map[string]any) {
		for _, e := range engines {
			if err := httpJSON("POST", e.HTTP+"/admin/faults", f, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	setFaults(map[string]any{"fail_mid_stream_next": 1})
	defer setFaults(map[string]any{})
	c := gwClient(g)
	stream := c.Completions.NewStreaming(context.Background(), openai.CompletionNewParams{
		Model:     openai.CompletionNewParamsModel(gwModel),
		Prompt:    openai.CompletionNewParamsPromptUnion{OfString: openai.String("a stream that breaks")},
		MaxTokens: openai.Int(20),
	})
	n := 0
	for stream.Next() {
		n++
	}
	err := stream.Err()
	if err == nil || !strings.Contains(err.Error(), "upstream_error") {
		t.Fatalf("after %d chunks the client got %v, want the gateway's upstream_error event", n, err)
	}
	if n != 1 {
		t.Fatalf("%d chunks before the error, want 1", n)
	}
	requireLoadsZero(t, admin, "an engine failed mid-stream")
}

// unhealthySkipped: gateway A's failed forwards mark the refusing worker unhealthy in the shared state;
// gateway B, which never forwarded to it, skips it (no forward, no retry) even when it is the least
// loaded.
func unhealthySkipped(t *testing.T, a, b string, engines []mockEngine) {
	health := func() statestore.WorkerHealth {
		for _, w := range gwWorkers(t, a) {
			if w.WorkerID == "dead" {
				return w.Health
			}
		}
		t.Fatal("worker dead not registered")
		return statestore.WorkerHealth{}
	}
	var busy []string
	for _, e := range engines {
		busy = append(busy, occupy(t, a, e.Name))
	}
	defer func() {
		for _, id := range busy {
			releaseReq(t, a, id)
		}
	}()
	ca := gwClient(a)
	for i := 0; i < 5 && health().State != "unhealthy"; i++ {
		if _, err := ca.Completions.New(context.Background(), openai.CompletionNewParams{
			Model: openai.CompletionNewParamsModel(gwModel), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("x")},
			MaxTokens: openai.Int(1)}); err != nil {
			t.Fatalf("request %d through A: %v", i, err)
		}
	}
	if h := health(); h.State != "unhealthy" {
		t.Fatalf("worker dead after repeated refused connections through A: %+v", h)
	}
	failuresB := metricValue(t, b, "kvrouter_gateway_upstream_failures_total", `worker="dead"`)
	cb := gwClient(b)
	var resp *http.Response
	if _, err := cb.Completions.New(context.Background(), openai.CompletionNewParams{
		Model: openai.CompletionNewParamsModel(gwModel), Prompt: openai.CompletionNewParamsPromptUnion{OfString: openai.String("y")},
		MaxTokens: openai.Int(1)}, option.WithResponseInto(&resp)); err != nil {
		t.Fatal(err)
	}
	if w := resp.Header.Get("X-Kvrouter-Worker"); w == "dead" {
		t.Fatal("B forwarded to the unhealthy worker")
	}
	if got := metricValue(t, b, "kvrouter_gateway_upstream_failures_total", `worker="dead"`); got != failuresB {
		t.Fatalf("B tried the unhealthy worker (%v failures, before %v)", got, failuresB)
	}
	// The explanation names the reason.
	var ex struct {
		Candidates []statestore.Candidate `json:"candidates"`
	}
	if err := httpJSON("POST", b+"/v1/route/explain", map[string]any{"isl": 10}, &ex); err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, c := range ex.Candidates {
		if c.WorkerID == "dead" {
			seen = true
			if c.Filtered != statestore.ReasonUnhealthy {
				t.Fatalf("explain through B: dead filtered %q, want %q", c.Filtered, statestore.ReasonUnhealthy)
			}
		}
	}
	if !seen {
		t.Fatal("explain through B lists no candidate dead")
	}
}
