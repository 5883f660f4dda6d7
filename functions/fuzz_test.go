package functions

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
)

// FuzzInvoke feeds arbitrary invocation payloads through the runtime's JSON handler wrapper: a payload
// that is not an HTTP event is an invocation error (never a panic); an event always gets a JSON answer,
// and never a 500.
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
		if err != nil {
			return // not decodable as an event: the runtime reports an invocation error
		}
		var r events.APIGatewayV2HTTPResponse
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("answer is not a response: %s", out)
		}
		if r.StatusCode == 500 || !json.Valid([]byte(r.Body)) {
			t.Fatalf("payload %q: %d %s", payload, r.StatusCode, r.Body)
		}
	})
}
