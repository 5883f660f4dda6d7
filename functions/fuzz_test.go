package functions

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// FuzzInvoke feeds arbitrary invocation payloads through the runtime's JSON handler wrapper: a payload
// that is not an HTTP event is an invocation error (never a panic); a payload that decodes as an event
// is never an invocation error and always gets a JSON answer, never a 500, an error with a code and a
// message.
func FuzzInvoke(f *testing.F) {
	for _, n := range fixtureOrder {
		b := readFixture(f, n)
		f.Add(b)
	}
	f.Add([]byte(`{"rawPath":"/v1/route","requestContext":{"http":{"method":"POST"}},"body":"{\"token_ids\":[1,2,3,4]}"}`))
	f.Add([]byte(`{"rawPath":"/prod/v1/events","requestContext":{"stage":"prod"},"body":"W10=","isBase64Encoded":true}`))
	lh := lambda.NewHandler(NewHandler(newAPI(f), 1<<16, allEndpoints...).HandleHTTP)
	f.Fuzz(func(t *testing.T, payload []byte) {
		out, err := lh.Invoke(context.Background(), payload)
		var ev events.APIGatewayV2HTTPRequest
		isEvent := json.Unmarshal(payload, &ev) == nil
		if err != nil {
			if isEvent {
				t.Fatalf("payload %q decodes as an event but the invocation failed: %v", payload, err)
			}
			return // not decodable as an event: the runtime reports an invocation error
		}
		var r events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("answer is not a response: %s", out)
		}
		if r.StatusCode == 500 || !json.Valid([]byte(r.Body)) {
			t.Fatalf("payload %q: %d %s", payload, r.StatusCode, r.Body)
		}
		if r.StatusCode >= 400 {
			var e struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			if json.Unmarshal([]byte(r.Body), &e) != nil || e.Error.Code == "" || e.Error.Message == "" {
				t.Fatalf("payload %q: error %d without code/message: %s", payload, r.StatusCode, r.Body)
			}
		}
	})
}
