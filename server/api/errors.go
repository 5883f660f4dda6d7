package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/kvrouter/kvrouter/statestore"
)

// errorEnvelope is the JSON shape of every error: {"error": {"code", "message"}}.
type errorEnvelope struct {
	Error statestore.ErrorBody `json:"error"`
}

func errorResponse(status int, code, msg string) Response {
	b, _ := json.Marshal(errorEnvelope{statestore.ErrorBody{Code: code, Message: msg}})
	return Response{Status: status, Body: b}
}

// Status maps an error to its HTTP status (SPEC §7, §10).
func Status(err error) int {
	switch {
	case errors.Is(err, statestore.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, statestore.ErrUnknownPool), errors.Is(err, statestore.ErrUnknownWorker):
		return http.StatusNotFound
	case errors.Is(err, statestore.ErrConflict):
		return http.StatusConflict
	case errors.Is(err, statestore.ErrNoEligibleWorker), errors.Is(err, statestore.ErrUnavailable),
		errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// fromError renders a router or store error.
func (a *API) fromError(err error) Response {
	st := Status(err)
	code := statestore.ErrorCode(err)
	msg := err.Error()
	if code == "timeout" {
		msg = "state store did not answer in time: " + msg
	}
	if st == http.StatusInternalServerError {
		a.log.Warn("internal error", "err", err)
	}
	return errorResponse(st, code, msg)
}

func badRequest(format string, args ...any) Response {
	return errorResponse(http.StatusBadRequest, "invalid_argument", fmt.Sprintf(format, args...))
}

func jsonResponse(status int, v any) Response {
	b, err := json.Marshal(v)
	if err != nil {
		return errorResponse(http.StatusInternalServerError, "internal", "encode response: "+err.Error())
	}
	return Response{Status: status, Body: b}
}

// decodeStrict decodes exactly one JSON value into v, rejecting unknown fields, wrong types and trailing
// data, with a message a client can act on.
func decodeStrict(body []byte, what string, v any) error {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return fmt.Errorf("%w: %s: empty body, want a JSON object", statestore.ErrInvalid, what)
	}
	if trimmed[0] != '{' {
		// null would decode into a zero value and mean "everything absent".
		return fmt.Errorf("%w: %s: want an object, got JSON %s", statestore.ErrInvalid, what, jsonKind(trimmed))
	}
	if !utf8.Valid(body) {
		// encoding/json would silently replace the bad bytes with U+FFFD, rewriting ids.
		return fmt.Errorf("%w: %s: body is not valid UTF-8", statestore.ErrInvalid, what)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %s: %s", statestore.ErrInvalid, what, describeJSONError(err))
	}
	if dec.More() {
		return fmt.Errorf("%w: %s: unexpected data after the JSON object", statestore.ErrInvalid, what)
	}
	if _, err := dec.Token(); err == nil {
		return fmt.Errorf("%w: %s: unexpected data after the JSON object", statestore.ErrInvalid, what)
	}
	return nil
}

// describeJSONError shortens encoding/json errors.
func describeJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		if field == "" {
			return fmt.Sprintf("want %s, got JSON %s", typeName(te.Type.String()), te.Value)
		}
		return fmt.Sprintf("field %q must be %s, got JSON %s", field, typeName(te.Type.String()), te.Value)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	}
	if errors.Is(err, errUnexpectedEOF) || err.Error() == "unexpected EOF" {
		return "malformed JSON: unexpected end of input"
	}
	return truncate(err.Error(), 300)
}

var errUnexpectedEOF = errors.New("unexpected EOF")

func typeName(t string) string {
	switch t {
	case "uint32":
		return "a token id (integer in [0, 4294967295])"
	case "int", "int64":
		return "an integer"
	case "float64":
		return "a number"
	case "string", "core.FlexString":
		return "a string"
	case "bool", "*bool":
		return "a boolean"
	case "api.routeBody", "core.RouteInput":
		return "an object"
	case "core.Hash":
		return "a 64-bit integer hash"
	}
	if strings.HasPrefix(t, "[]") {
		return "an array"
	}
	if strings.HasPrefix(t, "map[") || strings.Contains(t, "struct") || strings.HasPrefix(t, "core.") {
		return "an object"
	}
	return t
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func sortStrings(s []string) []string { sort.Strings(s); return s }
