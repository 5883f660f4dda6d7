// Package functions holds kvrouter's AWS Lambda handlers: route, explain, request completion
// (prefill_done / done) and events. Each accepts Lambda Function URL and API Gateway HTTP API (payload
// v2) events — the two share one JSON shape — and only translates: the request goes to the same
// transport-free api layer as `kvrouter serve`, so decisions, validation and errors are identical.
// The gateway function (GatewayHandler, cmd/lambda-gateway) serves the OpenAI-compatible endpoints with a
// streamed response over the same proxy core as `kvrouter serve` (package gateway).
// The store (a Redis client) and the router are created once per execution environment, outside the
// handler (see Setup, SetupGateway and the cmd/lambda-* mains).
package functions

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kvrouter/kvrouter/server/api"
	"github.com/kvrouter/kvrouter/statestore"
)

// Endpoint sets served by each function (api endpoint templates).
var (
	RouteEndpoints    = []string{"/v1/route"}
	ExplainEndpoints  = []string{"/v1/route/explain"}
	RequestsEndpoints = []string{"/v1/requests/{id}/prefill_done", "/v1/requests/{id}/done"}
	EventsEndpoints   = []string{"/v1/events"}
)

// Handler is one Lambda function: a set of API endpoints over one api.API.
type Handler struct {
	api          *api.API
	endpoints    map[string]bool
	maxBodyBytes int
}

// NewHandler serves the given endpoints (api endpoint templates) of a; bodies larger than maxBodyBytes
// (after base64 decoding) get 413 (0 = 6 MiB, Lambda's synchronous payload limit).
func NewHandler(a *api.API, maxBodyBytes int, endpoints ...string) *Handler {
	if maxBodyBytes <= 0 {
		maxBodyBytes = 6 << 20
	}
	h := &Handler{api: a, endpoints: map[string]bool{}, maxBodyBytes: maxBodyBytes}
	for _, e := range endpoints {
		h.endpoints[e] = true
	}
	return h
}

// HandleHTTP serves an API Gateway HTTP API (v2) event; a Function URL event decodes into the same type,
// so this is the function's entry point for both (lambda.Start(h.HandleHTTP)).
func (h *Handler) HandleHTTP(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	path := ev.RawPath
	if st := ev.RequestContext.Stage; st != "" && st != "$default" {
		path = strings.TrimPrefix(path, "/"+st)
	}
	method := ev.RequestContext.HTTP.Method
	status, body := h.serve(ctx, method, path, ev.RawQueryString, ev.QueryStringParameters, ev.Headers, ev.Body, ev.IsBase64Encoded)
	return events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: api.HeadersFor(status), Body: body}, nil
}

// HandleFunctionURL serves a Lambda Function URL event (typed variant, for direct callers).
func (h *Handler) HandleFunctionURL(ctx context.Context, ev events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
	status, body := h.serve(ctx, ev.RequestContext.HTTP.Method, ev.RawPath, ev.RawQueryString, ev.QueryStringParameters, ev.Headers, ev.Body, ev.IsBase64Encoded)
	return events.LambdaFunctionURLResponse{StatusCode: status, Headers: api.HeadersFor(status), Body: body}, nil
}

func (h *Handler) serve(ctx context.Context, method, path, rawQuery string, query, headers map[string]string, body string, b64 bool) (int, string) {
	if method == "" {
		method = http.MethodPost
	}
	if ep := api.Endpoint(path); !h.endpoints[ep] {
		return errBody(http.StatusNotFound, "not_found", fmt.Sprintf("this function does not serve %s %s (it serves %s)", method, trunc(path), strings.Join(h.list(), ", ")))
	}
	raw := []byte(body)
	if b64 {
		dec, err := base64.StdEncoding.DecodeString(body)
		if err != nil {
			return errBody(http.StatusBadRequest, "invalid_argument", "body is marked base64 but does not decode: "+err.Error())
		}
		raw = dec
	}
	if len(raw) > h.maxBodyBytes {
		return errBody(http.StatusRequestEntityTooLarge, "body_too_large", fmt.Sprintf("request body larger than %d bytes", h.maxBodyBytes))
	}
	if query == nil && rawQuery != "" {
		if v, err := url.ParseQuery(rawQuery); err == nil {
			query = map[string]string{}
			for k := range v {
				query[k] = v.Get(k)
			}
		}
	}
	lower := make(map[string]string, len(headers))
	for k, v := range headers {
		lower[strings.ToLower(k)] = v
	}
	resp := h.api.Do(ctx, api.Request{
		Method:  method,
		RawPath: path,
		Query:   func(k string) string { return query[k] },
		Header:  func(k string) string { return lower[strings.ToLower(k)] },
		Body:    raw,
	})
	return resp.Status, string(resp.Body)
}

func (h *Handler) list() []string {
	out := make([]string, 0, len(h.endpoints))
	for e := range h.endpoints {
		out = append(out, e)
	}
	if len(out) > 1 {
		for i := 1; i < len(out); i++ {
			for j := i; j > 0 && out[j] < out[j-1]; j-- {
				out[j], out[j-1] = out[j-1], out[j]
			}
		}
	}
	return out
}

// errBody is the api error envelope. It is JSON-encoded (not %q: Go escapes such as \x7f, which a path
// echoed in the message can contain, are not JSON — FuzzInvoke found it).
func errBody(status int, code, msg string) (int, string) {
	b, _ := json.Marshal(struct {
		Error statestore.ErrorBody `json:"error"`
	}{statestore.ErrorBody{Code: code, Message: msg}})
	return status, string(b)
}

func trunc(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
