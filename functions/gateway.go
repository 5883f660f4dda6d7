package functions

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kvrouter/kvrouter/gateway"
)

// Server is the OpenAI-compatible proxy core a gateway function serves; *gateway.Gateway satisfies it,
// the same core `kvrouter serve` runs behind fasthttp.
type Server interface {
	Serve(ctx context.Context, req gateway.Request, sink gateway.Sink)
}

// GatewayHandler serves the gateway endpoints (POST /v1/completions, POST /v1/chat/completions,
// GET /v1/models) as a streamed Lambda response: each chunk the core writes reaches the Lambda runtime,
// and through it the client, as it is written. It only translates: the event becomes a gateway.Request,
// the answer's status and headers become the streaming response's JSON prelude and its chunks the body.
//
// Two invocation sources, told apart by the event's shape:
//   - API Gateway REST API, Lambda proxy integration with response transfer mode STREAM (what the SAM
//     template deploys): API Gateway calls InvokeWithResponseStream with the REST proxy event (payload
//     1.0, events.APIGatewayProxyRequest) and expects the body to start with a JSON prelude {statusCode,
//     headers, multiValueHeaders} followed by 8 NUL bytes, then the payload
//     (docs.aws.amazon.com/apigateway/latest/developerguide/response-transfer-mode-lambda.html);
//     events.APIGatewayProxyStreamingResponse writes that prelude.
//   - A Function URL in RESPONSE_STREAM mode (events.LambdaFunctionURLRequest, payload 2.0): the same
//     prelude without multiValueHeaders, cookies apart (events.LambdaFunctionURLStreamingResponse).
//     Function URLs do not stream for VPC-attached functions, so this is for functions outside a VPC.
//
// The client cannot be seen leaving: Lambda does not tell a function that the caller of a streamed
// invocation disconnected (it runs on until it returns or times out), so the core learns it only if the
// runtime stops reading (Write then fails).
type GatewayHandler struct {
	srv          Server
	maxBodyBytes int
	log          *slog.Logger
}

// NewGatewayHandler serves srv; request bodies larger than maxBodyBytes after base64 decoding get 413
// (0 = 6 MiB, Lambda's invocation payload limit). A nil logger is slog.Default().
func NewGatewayHandler(srv Server, maxBodyBytes int, log *slog.Logger) *GatewayHandler {
	if maxBodyBytes <= 0 {
		maxBodyBytes = 6 << 20
	}
	if log == nil {
		log = slog.Default()
	}
	return &GatewayHandler{srv: srv, maxBodyBytes: maxBodyBytes, log: log}
}

// errUnknownEvent: the invocation payload is neither a REST proxy event nor a Function URL event.
var errUnknownEvent = errors.New("functions: gateway: the event is neither an API Gateway REST proxy event (httpMethod) nor a Function URL event (version 2.0, rawPath)")

// Handle is the function's entry point: lambda.StartHandlerFunc(h.Handle). It returns once the answer's
// status and headers are known; the body keeps streaming from the returned reader, which the runtime
// reads to its end (the invocation ends there).
func (h *GatewayHandler) Handle(ctx context.Context, payload json.RawMessage) (io.Reader, error) {
	var shape struct {
		HTTPMethod string `json:"httpMethod"`
		Version    string `json:"version"`
		RawPath    string `json:"rawPath"`
	}
	if err := json.Unmarshal(payload, &shape); err != nil {
		return nil, fmt.Errorf("functions: gateway: %w", err)
	}
	switch {
	case shape.HTTPMethod != "":
		var ev events.APIGatewayProxyRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("functions: gateway: REST proxy event: %w", err)
		}
		a := h.answer(ctx, restRequest(&ev))
		return &events.APIGatewayProxyStreamingResponse{StatusCode: a.status, Headers: a.single, MultiValueHeaders: a.multi,
			Body: a.body}, nil
	case shape.Version == "2.0" && shape.RawPath != "":
		var ev events.LambdaFunctionURLRequest
		if err := json.Unmarshal(payload, &ev); err != nil {
			return nil, fmt.Errorf("functions: gateway: Function URL event: %w", err)
		}
		a := h.answer(ctx, urlRequest(&ev))
		headers := a.single
		for k, v := range a.multi {
			if k != "Set-Cookie" {
				headers[k] = strings.Join(v, ",") // Function URLs take one value per header
			}
		}
		return &events.LambdaFunctionURLStreamingResponse{StatusCode: a.status, Headers: headers, Cookies: a.cookies,
			Body: a.body}, nil
	}
	return nil, errUnknownEvent
}

// inbound is an HTTP request as an event carries it.
type inbound struct {
	method, path, remote string
	header               map[string]string // lower-case names; repeated values joined with ","
	body                 string
	base64               bool
}

// restRequest reads a REST proxy event. Its path is the resource path without the stage (the stage is
// only in requestContext.path), so there is nothing to strip.
func restRequest(ev *events.APIGatewayProxyRequest) inbound {
	in := inbound{method: ev.HTTPMethod, path: ev.Path, remote: ev.RequestContext.Identity.SourceIP,
		header: make(map[string]string, len(ev.Headers)), body: ev.Body, base64: ev.IsBase64Encoded}
	for k, v := range ev.Headers {
		in.header[strings.ToLower(k)] = v
	}
	for k, vs := range ev.MultiValueHeaders { // the complete list when both are present
		if len(vs) > 0 {
			in.header[strings.ToLower(k)] = strings.Join(vs, ",")
		}
	}
	return in
}

// urlRequest reads a Function URL event; its rawPath has no stage.
func urlRequest(ev *events.LambdaFunctionURLRequest) inbound {
	in := inbound{method: ev.RequestContext.HTTP.Method, path: ev.RawPath, remote: ev.RequestContext.HTTP.SourceIP,
		header: make(map[string]string, len(ev.Headers)), body: ev.Body, base64: ev.IsBase64Encoded}
	for k, v := range ev.Headers {
		in.header[strings.ToLower(k)] = v
	}
	return in
}

// answer is a response head and its streaming body, transport-shaped: headers with one value, headers
// with several, and cookies (Set-Cookie) apart.
type answer struct {
	status  int
	single  map[string]string
	multi   map[string][]string
	cookies []string
	body    io.ReadCloser
}

// answer runs the core on a request and returns as soon as it has started the response.
func (h *GatewayHandler) answer(ctx context.Context, in inbound) answer {
	raw := []byte(in.body)
	if in.base64 {
		dec, err := base64.StdEncoding.DecodeString(in.body)
		if err != nil {
			return errorAnswer(http.StatusBadRequest, "invalid_request_error", "invalid_body", "the body is marked base64 but does not decode: "+err.Error())
		}
		raw = dec
	}
	if len(raw) > h.maxBodyBytes {
		return errorAnswer(http.StatusRequestEntityTooLarge, "invalid_request_error", "body_too_large", fmt.Sprintf("request body larger than %d bytes", h.maxBodyBytes))
	}
	req := gateway.Request{Method: in.method, Path: in.path, Body: raw, RemoteAddr: in.remote,
		Header: func(name string) string { return in.header[strings.ToLower(name)] }}
	if req.Method == "" {
		req.Method = http.MethodPost
	}
	s := newPipeSink()
	go h.serve(ctx, req, s)
	hd := <-s.started
	a := answer{status: hd.status, single: map[string]string{}, multi: map[string][]string{}, body: s.r}
	for k, vs := range hd.header {
		k = http.CanonicalHeaderKey(k)
		switch {
		case len(vs) == 0 || hopByHop[k]:
		case k == "Set-Cookie":
			a.cookies = append(a.cookies, vs...)
			a.multi[k] = vs
		case len(vs) == 1:
			a.single[k] = vs[0]
		default:
			a.multi[k] = vs
		}
	}
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a
}

// hopByHop are headers of one HTTP connection; the streamed response is re-framed by Lambda and API
// Gateway, so they must not be forwarded (a stale Content-Length would truncate or hang the client).
var hopByHop = map[string]bool{"Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Keep-Alive": true, "Upgrade": true, "Te": true, "Trailer": true}

// serve runs the core on its own goroutine, so the handler can return the response as soon as the head
// is known while the body streams. It always ends the body: at the end of Serve, with an error if Serve
// panicked mid-stream (the runtime then reports the invocation as failed through the response trailers),
// or with a 500 answer if Serve never started the response.
func (h *GatewayHandler) serve(ctx context.Context, req gateway.Request, s *pipeSink) {
	defer func() {
		p := recover()
		if p != nil {
			h.log.Error("gateway function: panic in the proxy core", "panic", p, "path", req.Path)
		}
		if !s.headSent {
			s.started <- head{status: http.StatusInternalServerError, header: http.Header{"Content-Type": {"application/json"}}}
			_, _ = s.w.Write(openAIError("server_error", "internal", "the gateway ended without an answer"))
			s.w.Close()
			return
		}
		if p != nil {
			s.w.CloseWithError(fmt.Errorf("gateway function: panic: %v", p))
			return
		}
		s.w.Close()
	}()
	h.srv.Serve(ctx, req, s)
}

// errorAnswer is a complete JSON error in OpenAI's shape, answered without running the core.
func errorAnswer(status int, typ, code, msg string) answer {
	return answer{status: status, single: map[string]string{"Content-Type": "application/json"},
		multi: map[string][]string{}, body: io.NopCloser(bytes.NewReader(openAIError(typ, code, msg)))}
}

// openAIError renders {"error": {"message", "type", "code"}}, the error shape of the gateway endpoints.
func openAIError(typ, code, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"message": msg, "type": typ, "code": code}})
	return b
}
