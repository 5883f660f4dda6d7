package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/gateway"
	"github.com/kvrouter/kvrouter/simulation/mock"
	"github.com/kvrouter/kvrouter/statestore"
)

// serverFunc adapts a function to Server.
type serverFunc func(ctx context.Context, req gateway.Request, sink gateway.Sink)

func (f serverFunc) Serve(ctx context.Context, req gateway.Request, sink gateway.Sink) {
	f(ctx, req, sink)
}

// splitPrelude reads a streamed response to its end and splits it at the 8 NUL bytes.
func splitPrelude(t *testing.T, r io.Reader) (map[string]any, string, error) {
	t.Helper()
	b, err := io.ReadAll(r)
	i := bytes.Index(b, make([]byte, 8))
	if i < 0 {
		t.Fatalf("no prelude delimiter in %q (read error %v)", b, err)
	}
	var p map[string]any
	if err := json.Unmarshal(b[:i], &p); err != nil {
		t.Fatalf("prelude %q: %v", b[:i], err)
	}
	return p, string(b[i+8:]), err
}

func TestGatewayHandlerErrorsAndEdges(t *testing.T) {
	ctx := context.Background()
	echo := serverFunc(func(ctx context.Context, req gateway.Request, sink gateway.Sink) {
		sink.Start(201, http.Header{"Set-Cookie": {"a=1", "b=2"}, "X-Len": {strconv.Itoa(len(req.Body))}})
		sink.Write([]byte("ok"))
	})
	cases := []struct {
		name       string
		srv        Server
		event      string
		wantStatus float64
		wantBody   string // substring
		wantErr    bool   // the body ends with a read error (runtime: failed invocation)
	}{
		{"no answer is a 500", serverFunc(func(context.Context, gateway.Request, gateway.Sink) {}), restEvent, 500, `"type":"server_error"`, false},
		{"panic before the head is a 500", serverFunc(func(context.Context, gateway.Request, gateway.Sink) { panic("boom") }), restEvent, 500, `"code":"internal"`, false},
		{"panic mid-stream fails the body", serverFunc(func(_ context.Context, _ gateway.Request, s gateway.Sink) {
			s.Start(200, nil)
			s.Write([]byte("data: 1\n\n"))
			panic("boom")
		}), restEvent, 200, "data: 1\n\n", true},
		{"body too large", echo, strings.Replace(restEvent, `"body":"{`, `"body":"`+strings.Repeat("x", 2000)+`{`, 1), 413, `"code":"body_too_large"`, false},
		{"bad base64", echo, strings.Replace(urlEvent, "eyJtb2RlbCI6Im0ifQ==", "%%%", 1), 400, `"code":"invalid_body"`, false},
		{"cookies and status", echo, urlEvent, 201, "ok", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := NewGatewayHandler(c.srv, 1024, slog.New(slog.NewTextHandler(io.Discard, nil)))
			r, err := h.Handle(ctx, json.RawMessage(c.event))
			if err != nil {
				t.Fatal(err)
			}
			p, body, rerr := splitPrelude(t, r)
			if p["statusCode"] != c.wantStatus || !strings.Contains(body, c.wantBody) || (rerr != nil) != c.wantErr {
				t.Fatalf("prelude %v body %q read error %v; want status %v, body containing %q, error %v", p, body, rerr, c.wantStatus, c.wantBody, c.wantErr)
			}
			if c.name == "cookies and status" {
				if _, ok := r.(*events.LambdaFunctionURLStreamingResponse); !ok {
					t.Fatalf("a Function URL event answered with %T", r)
				}
				if got, _ := json.Marshal(p["cookies"]); string(got) != `["a=1","b=2"]` || p["headers"].(map[string]any)["X-Len"] != "13" {
					t.Fatalf("prelude %v: want the cookies apart and the 13-byte body seen", p)
				}
			}
		})
	}

	h := NewGatewayHandler(echo, 0, nil)
	if _, err := h.Handle(ctx, json.RawMessage(`{"hello":"world"}`)); !errors.Is(err, errUnknownEvent) {
		t.Fatalf("unknown event: %v", err)
	}
}

func TestPipeSinkContract(t *testing.T) {
	s := newPipeSink()
	if err := s.Write([]byte("x")); !errors.Is(err, errNotStarted) {
		t.Fatalf("write before start: %v", err)
	}
	if err := s.Start(200, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(200, nil); !errors.Is(err, errStartedTwice) {
		t.Fatalf("second start: %v", err)
	}
	s.r.Close() // the runtime stopped reading
	if err := s.Write([]byte("x")); err == nil {
		t.Fatal("write after the reader closed succeeded: the core would not learn that nobody reads")
	}
}

// TestGatewayFunctionOverMockEngine runs the gateway function as deployed (SetupGateway's proxy core, the
// streamed handler) on a REST proxy event for a streamed chat completion, against a real mock engine: the
// body that the runtime would stream is the engine's SSE stream, whole and in order, after a prelude with
// the gateway's headers.
func TestGatewayFunctionOverMockEngine(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	eng, err := mock.Start(ctx, mock.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	c, err := ConfigFromEnv(func(k string) string {
		return map[string]string{"KVROUTER_POOL": "p", "KVROUTER_PROXY_RETRIES": "0"}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	gw, st, err := SetupGateway(ctx, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rt := core.New(st, core.Options{}) // the same store: what an operator's PUT /v1/pools and /v1/workers do
	cfg := statestore.DefaultPoolConfig(16)
	cfg.Models = []string{"mock-model"}
	if err := rt.PutPool(ctx, "p", cfg); err != nil {
		t.Fatal(err)
	}
	if err := rt.PutWorker(ctx, "p", statestore.WorkerSpec{WorkerID: "w1", URL: eng.URL()}, 0); err != nil {
		t.Fatal(err)
	}

	ev := strings.Replace(restEvent, `"body":"{\"model\":\"m\",\"stream\":true}"`,
		`"body":"{\"model\":\"mock-model\",\"stream\":true,\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi there\"}]}"`, 1)
	r, err := NewGatewayHandler(gw, 0, nil).Handle(ctx, json.RawMessage(ev))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(*events.APIGatewayProxyStreamingResponse); !ok {
		t.Fatalf("a REST proxy event answered with %T", r)
	}
	p, body, rerr := splitPrelude(t, r)
	if rerr != nil {
		t.Fatal(rerr)
	}
	hd, _ := p["headers"].(map[string]any)
	if p["statusCode"] != 200.0 || !strings.HasPrefix(fmt.Sprint(hd["Content-Type"]), "text/event-stream") || hd["X-Kvrouter-Worker"] != "w1" {
		t.Fatalf("prelude %v", p)
	}
	var chunks int
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "data: {") {
			chunks++
		}
	}
	if chunks != 5 || !strings.HasSuffix(body, "data: [DONE]\n\n") {
		t.Fatalf("streamed body with %d token chunks, want 5 then [DONE]:\n%s", chunks, body)
	}
}
