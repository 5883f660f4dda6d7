package functions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/kvrouter/kvrouter/gateway"
)

// childEnv makes the test binary run as the Lambda function process of TestGatewayStreamsThroughRuntime
// (see TestMain): the runtime loop calls log.Fatal when the Runtime API fails it, which must not kill the
// test binary itself.
const childEnv = "KVROUTER_TEST_GATEWAY_LAMBDA_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		runGatewayChild() // never returns: the parent kills this process
	}
	os.Exit(m.Run())
}

// streamChunks are what scriptedServer streams, in order.
var streamChunks = []string{"data: {\"n\":1}\n\n", "data: {\"n\":2}\n\n", "data: [DONE]\n\n"}

// scriptedServer is the proxy core of the child process: it echoes what it received in response headers
// and streams streamChunks, writing chunk i+1 only after the Runtime API emulator (the parent) reports it
// has read chunk i from the runtime's response stream — the proof that chunks are not buffered.
type scriptedServer struct {
	readURL string // GET readURL + i blocks until the emulator has read chunk i (1-based)
}

func (s scriptedServer) Serve(ctx context.Context, req gateway.Request, sink gateway.Sink) {
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Content-Length", "999") // hop-by-hop: must not reach the prelude
	h.Set("X-Echo-Method", req.Method)
	h.Set("X-Echo-Path", req.Path)
	h.Set("X-Echo-Session", req.Header("x-session-id"))
	h.Set("X-Echo-Body", string(req.Body))
	h.Set("X-Echo-Remote", req.RemoteAddr)
	h["X-Multi"] = []string{"a", "b"}
	if err := sink.Start(http.StatusOK, h); err != nil {
		panic(err)
	}
	for i, c := range streamChunks {
		if i > 0 && req.Path == failPath {
			panic("the proxy core fails mid-stream")
		}
		if i > 0 {
			resp, err := http.Get(fmt.Sprint(s.readURL, i))
			if err != nil {
				panic(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				panic(fmt.Sprintf("the emulator did not read chunk %d: %s", i, resp.Status))
			}
		}
		if err := sink.Write([]byte(c)); err != nil {
			panic(err)
		}
	}
}

func runGatewayChild() {
	api := os.Getenv("AWS_LAMBDA_RUNTIME_API")
	h := NewGatewayHandler(scriptedServer{readURL: "http://" + api + "/test/read/"}, 1<<20, nil)
	lambda.StartHandlerFunc(h.Handle)
	os.Exit(3) // unreachable: StartHandlerFunc only returns through log.Fatal
}

// failPath makes scriptedServer panic after its first chunk.
const failPath = "/v1/fail"

// Invocation events: the REST proxy event of API Gateway's streaming integration, and a Function URL
// event with a base64 body.
const (
	restEvent = `{"resource":"/{proxy+}","path":"/v1/chat/completions","httpMethod":"POST",
"headers":{"Content-Type":"application/json","X-Session-ID":"s-1"},
"multiValueHeaders":{"Content-Type":["application/json"],"X-Session-ID":["s-1"]},
"requestContext":{"resourcePath":"/{proxy+}","httpMethod":"POST","path":"/prod/v1/chat/completions","stage":"prod",
"identity":{"sourceIp":"198.51.100.7"}},"body":"{\"model\":\"m\",\"stream\":true}","isBase64Encoded":false}`
	urlEvent = `{"version":"2.0","rawPath":"/v1/completions","rawQueryString":"","headers":{"x-session-id":"s-2"},
"requestContext":{"http":{"method":"POST","path":"/v1/completions","sourceIp":"203.0.113.9"}},
"body":"eyJtb2RlbCI6Im0ifQ==","isBase64Encoded":true}`
)

// streamedInvocation is what the emulator read from one streamed response POST.
type streamedInvocation struct {
	contentType, transferEncoding string
	trailers                      []string
	errorType                     string // the Lambda-Runtime-Function-Error-Type trailer's value
	prelude                       map[string]any
	chunks                        []string
	err                           error
}

// TestGatewayStreamsThroughRuntime runs the real aws-lambda-go runtime loop (in a child process) against
// an emulation of the Lambda Runtime API, with three invocations: a REST proxy event and a Function URL
// event, whose responses must arrive as streamed POSTs (chunked) whose body is the JSON prelude (status,
// headers), 8 NUL bytes, then the chunks in order — and chunk i+1 is written only after the emulator
// has read chunk i; then a request on which the core panics after its first chunk: the body ends there
// and the runtime reports the failure in the Lambda-Runtime-Function-Error-Type trailer. (aws-lambda-go
// v1.55.1 does not send the Lambda-Runtime-Function-Response-Mode header the custom-runtime docs
// describe; chunked encoding with the error trailers declared is what it sends, so that is asserted.)
func TestGatewayStreamsThroughRuntime(t *testing.T) {
	events := []string{restEvent, urlEvent, strings.Replace(restEvent, `"path":"/v1/chat/completions"`, `"path":"`+failPath+`"`, 1)}
	var mu sync.Mutex
	next := 0
	read := make([]chan struct{}, len(streamChunks)) // read[i] closed when the current invocation's chunk i is read
	resetRead := func() {
		for i := range read {
			read[i] = make(chan struct{})
		}
	}
	resetRead()
	done := make(chan streamedInvocation)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		i := next
		next++
		mu.Unlock()
		if i >= len(events) {
			<-r.Context().Done() // block until the child is killed: an error would log.Fatal it
			return
		}
		w.Header().Set("Lambda-Runtime-Aws-Request-Id", fmt.Sprintf("inv-%d", i))
		w.Header().Set("Lambda-Runtime-Deadline-Ms", fmt.Sprint(time.Now().Add(5*time.Minute).UnixMilli()))
		w.Header().Set("Lambda-Runtime-Invoked-Function-Arn", "arn:aws:lambda:us-east-1:123456789012:function:kvrouter-gateway")
		io.WriteString(w, events[i])
	})
	mux.HandleFunc("GET /test/read/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		mu.Lock()
		ch := read[n-1]
		mu.Unlock()
		select {
		case <-ch:
		case <-time.After(time.Minute):
			http.Error(w, "chunk not read within a minute: the response is not streamed", http.StatusGatewayTimeout)
		}
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		inv := streamedInvocation{contentType: r.Header.Get("Content-Type"), transferEncoding: strings.Join(r.TransferEncoding, ",")}
		for k := range r.Trailer {
			inv.trailers = append(inv.trailers, k)
		}
		inv.err = readStream(r.Body, &inv, func(i int) {
			mu.Lock()
			close(read[i])
			mu.Unlock()
		})
		inv.errorType = r.Trailer.Get("Lambda-Runtime-Function-Error-Type") // read once the body is
		mu.Lock()
		resetRead() // before the next invocation can start
		mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
		done <- inv
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusAccepted)
		done <- streamedInvocation{err: fmt.Errorf("invocation %s failed: %s", r.PathValue("id"), b)}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emu := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	emu.Start()

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childEnv+"=1", "AWS_LAMBDA_RUNTIME_API="+ln.Addr().String())
	var stderr bytes.Buffer
	child.Stdout, child.Stderr = &stderr, &stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- child.Wait() }()
	defer func() {
		child.Process.Kill()
		<-exited
		emu.Close()
	}()

	var got []streamedInvocation
	for range events {
		select {
		case inv := <-done:
			got = append(got, inv)
		case err := <-exited:
			t.Fatalf("the Lambda process exited: %v\n%s", err, stderr.String())
		case <-time.After(2 * time.Minute):
			t.Fatalf("no response within 2 minutes\n%s", stderr.String())
		}
	}
	failed := got[2]
	got = got[:2]
	if failed.err == nil || len(failed.chunks) != 1 || failed.errorType == "" || failed.prelude["statusCode"] != 200.0 {
		t.Errorf("failing invocation: chunks %q, read error %v, error-type trailer %q, prelude %v; want the first chunk, then the body cut and the error reported in the trailer",
			failed.chunks, failed.err, failed.errorType, failed.prelude)
	}
	for i, inv := range got {
		if inv.err != nil {
			t.Fatalf("invocation %d: %v\n%s", i, inv.err, stderr.String())
		}
		if inv.contentType != "application/vnd.awslambda.http-integration-response" || inv.transferEncoding != "chunked" {
			t.Errorf("invocation %d: POST with Content-Type %q, Transfer-Encoding %q; want the http-integration-response prelude, chunked",
				i, inv.contentType, inv.transferEncoding)
		}
		sort.Strings(inv.trailers)
		if fmt.Sprint(inv.trailers) != "[Lambda-Runtime-Function-Error-Body Lambda-Runtime-Function-Error-Type]" || inv.errorType != "" {
			t.Errorf("invocation %d: trailers %v (error type %q); want both error trailers declared and unset", i, inv.trailers, inv.errorType)
		}
		if strings.Join(inv.chunks, "") != strings.Join(streamChunks, "") {
			t.Errorf("invocation %d: body %q, want %q", i, inv.chunks, streamChunks)
		}
	}

	rest := got[0].prelude
	wantRest := map[string]any{"statusCode": 200.0,
		"headers": map[string]any{"Content-Type": "text/event-stream", "X-Echo-Method": "POST", "X-Echo-Path": "/v1/chat/completions",
			"X-Echo-Session": "s-1", "X-Echo-Body": `{"model":"m","stream":true}`, "X-Echo-Remote": "198.51.100.7"},
		"multiValueHeaders": map[string]any{"X-Multi": []any{"a", "b"}}}
	if !jsonEqual(rest, wantRest) {
		t.Errorf("REST prelude %v\nwant %v", rest, wantRest)
	}
	url := got[1].prelude
	wantURL := map[string]any{"statusCode": 200.0,
		"headers": map[string]any{"Content-Type": "text/event-stream", "X-Echo-Method": "POST", "X-Echo-Path": "/v1/completions",
			"X-Echo-Session": "s-2", "X-Echo-Body": `{"model":"m"}`, "X-Echo-Remote": "203.0.113.9", "X-Multi": "a,b"}}
	if !jsonEqual(url, wantURL) {
		t.Errorf("Function URL prelude %v\nwant %v", url, wantURL)
	}
}

// readStream reads a streamed response body: the JSON prelude up to 8 NUL bytes, then exactly the bytes
// of streamChunks one chunk at a time (calling chunkRead(i) after chunk i), then EOF.
func readStream(body io.Reader, inv *streamedInvocation, chunkRead func(i int)) error {
	br := bufio.NewReader(body)
	var prelude []byte
	for !bytes.HasSuffix(prelude, make([]byte, 8)) {
		b, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("prelude: %w after %q", err, prelude)
		}
		prelude = append(prelude, b)
	}
	if err := json.Unmarshal(prelude[:len(prelude)-8], &inv.prelude); err != nil {
		return fmt.Errorf("prelude %q: %w", prelude, err)
	}
	for i, c := range streamChunks {
		buf := make([]byte, len(c))
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("chunk %d: %w", i+1, err)
		}
		inv.chunks = append(inv.chunks, string(buf))
		chunkRead(i)
	}
	if rest, err := io.ReadAll(br); err != nil || len(rest) > 0 {
		return fmt.Errorf("after the last chunk: %q, %v", rest, err)
	}
	return nil
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}
