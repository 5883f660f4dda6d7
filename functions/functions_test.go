package functions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/internal/testredis"
	"github.com/kvrouter/kvrouter/server"
	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

var allEndpoints = append(append(append(append([]string{}, RouteEndpoints...), ExplainEndpoints...), RequestsEndpoints...), EventsEndpoints...)

// fixtures in the order they are played: events, two routes (Function URL, API Gateway with a stage), done.
var fixtureOrder = []string{"function_url_events.json", "function_url_route.json", "apigw_v2_route.json", "apigw_v2_done.json"}

// newAPI returns an API over a fresh memory store with pool "default" (block size 4) and workers w0..w2.
func newAPI(t testing.TB) *api.API {
	t.Helper()
	ctx := context.Background()
	a, _, err := Setup(ctx, Config{Store: "memory", Pool: "default", BlockSize: 4, StoreTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"w0", "w1", "w2"} {
		r := a.Do(ctx, api.Request{Method: "PUT", RawPath: "/v1/workers/" + w, Body: []byte(`{"url":"http://` + w + `:8000"}`)})
		if r.Status != 200 {
			t.Fatalf("register %s: %d %s", w, r.Status, r.Body)
		}
	}
	return a
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkAnswers verifies the answers to fixtureOrder: the events applied, both routes chose w1 (which holds
// the prefix) with the right overlap, and done found the first route's lease.
func checkAnswers(t *testing.T, statuses []int, bodies []string) {
	t.Helper()
	for i, s := range statuses {
		if s != 200 {
			t.Fatalf("%s: status %d: %s", fixtureOrder[i], s, bodies[i])
		}
	}
	if !strings.Contains(bodies[0], `"applied":2`) {
		t.Errorf("events: %s", bodies[0])
	}
	var d1, d2 statestore.Decision
	if json.Unmarshal([]byte(bodies[1]), &d1) != nil || d1.WorkerID != "w1" || d1.OverlapBlocks != 2 || d1.RequestID != "lambda-1" || d1.URL != "http://w1:8000" {
		t.Errorf("function URL route: %s", bodies[1])
	}
	if json.Unmarshal([]byte(bodies[2]), &d2) != nil || d2.WorkerID != "w1" || d2.OverlapBlocks != 3 || d2.RequestID != "lambda-2" {
		t.Errorf("API gateway route: %s", bodies[2])
	}
	if !strings.Contains(bodies[3], `"found":true`) {
		t.Errorf("done: %s", bodies[3])
	}
}

// Way 1: call the handler directly with typed events (Function URL and API Gateway v2).
func TestDirectCall(t *testing.T) {
	h := NewHandler(newAPI(t), 0, allEndpoints...)
	ctx := context.Background()
	var statuses []int
	var bodies []string
	for _, name := range fixtureOrder {
		raw := readFixture(t, name)
		if strings.HasPrefix(name, "function_url") {
			var ev events.LambdaFunctionURLRequest
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			r, err := h.HandleFunctionURL(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			statuses, bodies = append(statuses, r.StatusCode), append(bodies, r.Body)
		} else {
			var ev events.APIGatewayV2HTTPRequest
			if err := json.Unmarshal(raw, &ev); err != nil {
				t.Fatal(err)
			}
			r, err := h.HandleHTTP(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			if r.Headers["Content-Type"] != "application/json" {
				t.Errorf("content type %q", r.Headers["Content-Type"])
			}
			statuses, bodies = append(statuses, r.StatusCode), append(bodies, r.Body)
		}
	}
	checkAnswers(t, statuses, bodies)
}

// Way 2: JSON round trip through the aws-lambda-go handler wrapper (what the runtime calls).
func TestInvokeRoundTrip(t *testing.T) {
	lh := lambda.NewHandler(NewHandler(newAPI(t), 0, allEndpoints...).HandleHTTP)
	var statuses []int
	var bodies []string
	for _, name := range fixtureOrder {
		out, err := lh.Invoke(context.Background(), readFixture(t, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var r events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("%s: %v: %s", name, err, out)
		}
		statuses, bodies = append(statuses, r.StatusCode), append(bodies, r.Body)
	}
	checkAnswers(t, statuses, bodies)
}

// Way 3: the real runtime loop (lambda.Start) against a local fake of the Lambda Runtime API.
func TestRuntimeLoop(t *testing.T) {
	var mu sync.Mutex
	next := 0
	responses := make([][]byte, len(fixtureOrder))
	got := make(chan int, len(fixtureOrder))
	block := make(chan struct{}) // never closed: /next blocks after the last invocation
	fixtures := make([][]byte, len(fixtureOrder))
	for i, n := range fixtureOrder {
		fixtures[i] = readFixture(t, n)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i := next
		next++
		mu.Unlock()
		if i >= len(fixtures) {
			<-block // an error here would make the runtime log.Fatal the test binary
			return
		}
		w.Header().Set("Lambda-Runtime-Aws-Request-Id", fmt.Sprintf("inv-%d", i))
		w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(time.Minute).UnixMilli()))
		w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:kvrouter-test")
		w.Write(fixtures[i])
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		var i int
		fmt.Sscanf(r.PathValue("id"), "inv-%d", &i)
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		responses[i] = b
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		got <- i
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		t.Errorf("invocation %s failed: %s", r.PathValue("id"), b)
		w.WriteHeader(http.StatusAccepted)
		got <- -1
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	fake.Start() // deliberately never closed: the runtime goroutine keeps a blocked /next open
	t.Setenv("AWS_LAMBDA_RUNTIME_API", ln.Addr().String())
	h := NewHandler(newAPI(t), 0, allEndpoints...)
	go lambda.Start(h.HandleHTTP)
	for range fixtureOrder {
		select {
		case i := <-got:
			if i < 0 {
				t.FailNow()
			}
		case <-time.After(2 * time.Minute):
			t.Fatal("runtime loop did not answer")
		}
	}
	var statuses []int
	var bodies []string
	for i, raw := range responses {
		var r events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(raw, &r); err != nil {
			t.Fatalf("%s: %v: %s", fixtureOrder[i], err, raw)
		}
		statuses, bodies = append(statuses, r.StatusCode), append(bodies, r.Body)
	}
	checkAnswers(t, statuses, bodies)
}

// The Lambda handler and the fasthttp server answer the same requests with the same bytes.
func TestSameAsServer(t *testing.T) {
	h := NewHandler(newAPI(t), 0, allEndpoints...)
	srv, err := server.New(newAPI(t), server.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	ln := fasthttputil.NewInmemoryListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	defer func() { cancel(); <-done }()
	client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }}
	for _, name := range fixtureOrder {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(readFixture(t, name), &ev); err != nil {
			t.Fatal(err)
		}
		lr, _ := h.HandleHTTP(context.Background(), ev)
		body := []byte(ev.Body)
		if ev.IsBase64Encoded {
			body = decodeB64(t, ev.Body)
		}
		path := strings.TrimPrefix(ev.RawPath, "/"+ev.RequestContext.Stage)
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://kvrouter" + path + "?" + ev.RawQueryString)
		req.Header.SetMethod(ev.RequestContext.HTTP.Method)
		for k, v := range ev.Headers {
			req.Header.Set(k, v)
		}
		req.SetBody(body)
		if err := client.Do(req, resp); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode() != lr.StatusCode || !bytes.Equal(resp.Body(), []byte(lr.Body)) {
			t.Errorf("%s: server %d %s\nlambda %d %s", name, resp.StatusCode(), resp.Body(), lr.StatusCode, lr.Body)
		}
	}
}

func decodeB64(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestHandlerErrors(t *testing.T) {
	h := NewHandler(newAPI(t), 2048, RouteEndpoints...)
	ctx := context.Background()
	for _, c := range []struct {
		ev     events.APIGatewayV2HTTPRequest
		status int
		want   string
	}{
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/events", Body: "[]"}, 404, "does not serve"},
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/route", Body: "{"}, 400, "malformed"},
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/route", Body: "!!!", IsBase64Encoded: true}, 400, "base64"},
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/route", Body: strings.Repeat(" ", 4096)}, 413, "larger than"},
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/route", Body: `{"pool":"x"}`}, 404, "unknown pool"},
		{events.APIGatewayV2HTTPRequest{RawPath: "/v1/route", Body: `{"config":{"temperature":-1}}`}, 400, "temperature"},
	} {
		r, err := h.HandleHTTP(ctx, c.ev)
		if err != nil || r.StatusCode != c.status || !strings.Contains(r.Body, c.want) || !json.Valid([]byte(r.Body)) {
			t.Errorf("%s %.40q: %d %s (err %v), want %d %q", c.ev.RawPath, c.ev.Body, r.StatusCode, r.Body, err, c.status, c.want)
		}
	}
}

func TestConfigFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	c, err := ConfigFromEnv(env(map[string]string{"KVROUTER_STORE": "redis://r:6379", "KVROUTER_BLOCK_SIZE": "32"}))
	if err != nil || c.Store != "redis://r:6379" || c.BlockSize != 32 || c.Pool != core.DefaultPool {
		t.Fatalf("%+v %v", c, err)
	}
	for k, v := range map[string]string{"KVROUTER_BLOCK_SIZE": "-1", "KVROUTER_STORE_TIMEOUT": "soon", "KVROUTER_LOG_LEVEL": "loud", "KVROUTER_MAX_BODY_BYTES": "1"} {
		if _, err := ConfigFromEnv(env(map[string]string{k: v})); err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: error %v does not name the variable", k, v, err)
		}
	}
	if _, err := OpenStore(context.Background(), "mongodb://x"); err == nil || !strings.Contains(err.Error(), "KVROUTER_STORE") {
		t.Errorf("bad store URL: %v", err)
	}
}

// Two execution environments (two Setup calls, two Redis clients) on one real Redis agree: workers,
// events and loads written through one are seen by the other.
func TestTwoEnvironmentsOneRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server: skipped in -short mode")
	}
	r := testredis.Start(t)
	ctx := context.Background()
	cfg := Config{Store: r.URL(), Pool: "default", BlockSize: 4, StoreTimeout: 5 * time.Second}
	a1, st1, err := Setup(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st1.Close()
	a2, st2, err := Setup(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	for _, w := range []string{"w0", "w1", "w2"} {
		if r := a1.Do(ctx, api.Request{Method: "PUT", RawPath: "/v1/workers/" + w, Body: []byte(`{"url":"http://` + w + `:8000"}`)}); r.Status != 200 {
			t.Fatalf("%d %s", r.Status, r.Body)
		}
	}
	route, evh, requests := NewHandler(a1, 0, RouteEndpoints...), NewHandler(a2, 0, EventsEndpoints...), NewHandler(a2, 0, RequestsEndpoints...)
	call := func(h *Handler, name string) events.APIGatewayV2HTTPResponse {
		var ev events.APIGatewayV2HTTPRequest
		if err := json.Unmarshal(readFixture(t, name), &ev); err != nil {
			t.Fatal(err)
		}
		resp, err := h.HandleHTTP(ctx, ev)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s %v", name, resp.StatusCode, resp.Body, err)
		}
		return resp
	}
	bodies := []string{call(evh, "function_url_events.json").Body, call(route, "function_url_route.json").Body,
		call(route, "apigw_v2_route.json").Body, call(requests, "apigw_v2_done.json").Body}
	checkAnswers(t, []int{200, 200, 200, 200}, bodies)
}
