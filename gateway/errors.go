package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/kvrouter/kvrouter/statestore"
)

// openAIError is OpenAI's error body: {"error": {"message", "type", "code"}} (SPEC §7.2). Every error the
// gateway itself answers on its endpoints has this shape; a worker's own error answers pass through
// unchanged.
type openAIError struct {
	Error openAIErrorBody `json:"error"`
}

type openAIErrorBody struct {
	Message string `json:"message"`
	Type    string `json:"type"`
	Code    string `json:"code"`
}

// Error codes the gateway answers with (the "code" field), beside statestore.ErrorCode's.
const (
	CodeModelNotFound     = "model_not_found"
	CodeMethodNotAllowed  = "method_not_allowed"
	CodeNotFound          = "not_found"
	CodeUpstreamConnect   = "upstream_unavailable"
	CodeUpstreamTimeout   = "upstream_timeout"
	CodeUpstreamError     = "upstream_error"
	CodeUpstreamTooLarge  = "upstream_response_too_large"
	CodeInternal          = "internal"
	typeInvalidRequest    = "invalid_request_error"
	typeNotFound          = "not_found_error"
	typeServer            = "server_error"
	typeServiceUnavailabe = "service_unavailable"
)

// errorBody renders an error body.
func errorBody(typ, code, msg string) []byte {
	b, _ := json.Marshal(openAIError{openAIErrorBody{Message: msg, Type: typ, Code: code}})
	return b
}

// errorResponse is a complete JSON error answer.
func errorResponse(status int, typ, code, msg string) *Response {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	if status == http.StatusServiceUnavailable {
		// The state store or every worker is unavailable for now; a well-behaved client backs off.
		h.Set("Retry-After", "1")
	}
	return &Response{Status: status, Header: h, Body: errorBody(typ, code, msg)}
}

// storeErrorResponse maps a router/store error: bad input 400, unknown pool 404, no eligible worker and
// store unavailable 503 (with Retry-After), anything else 500.
func storeErrorResponse(err error) *Response {
	code := statestore.ErrorCode(err)
	switch {
	case errors.Is(err, statestore.ErrInvalid):
		return errorResponse(http.StatusBadRequest, typeInvalidRequest, code, err.Error())
	case errors.Is(err, statestore.ErrUnknownPool), errors.Is(err, statestore.ErrUnknownWorker):
		return errorResponse(http.StatusNotFound, typeNotFound, code, err.Error())
	case errors.Is(err, statestore.ErrConflict):
		return errorResponse(http.StatusConflict, typeInvalidRequest, code, err.Error())
	case errors.Is(err, statestore.ErrNoEligibleWorker), errors.Is(err, statestore.ErrUnavailable):
		return errorResponse(http.StatusServiceUnavailable, typeServiceUnavailabe, code, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return errorResponse(http.StatusServiceUnavailable, typeServiceUnavailabe, "timeout",
			"state store did not answer in time: "+err.Error())
	}
	return errorResponse(http.StatusInternalServerError, typeServer, CodeInternal, err.Error())
}

// sseError is the event a stream ends with when its worker fails mid-stream: OpenAI's error shape as an
// SSE data line (what vLLM sends for errors raised while streaming).
func sseError(code, msg string) []byte {
	b := errorBody(typeServer, code, msg)
	out := make([]byte, 0, len(b)+10)
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}
