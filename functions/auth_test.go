package functions

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/kvrouter/kvrouter/server/api"
)

// TestFunctionScopes (defect 2): every function serves endpoints of one scope only, so IAM permission
// to invoke a function is permission for exactly one scope; events (admin) has its own function.
func TestFunctionScopes(t *testing.T) {
	for name, eps := range map[string][]string{"route": RouteEndpoints, "explain": ExplainEndpoints,
		"requests": RequestsEndpoints, "events": EventsEndpoints} {
		want := api.ScopeOf(concrete(eps[0]))
		for _, e := range eps {
			if got := api.ScopeOf(concrete(e)); got != want {
				t.Errorf("function %s serves %s (scope %s) beside scope %s: it must check tokens per request", name, e, got, want)
			}
		}
	}
	if api.ScopeOf("/v1/events") != api.ScopeAdmin || api.ScopeOf("/v1/route") != api.ScopeRoute {
		t.Fatal("scopes of events/route")
	}
}

// concrete turns an endpoint template into a path ("{id}" → "x").
func concrete(template string) string { return strings.ReplaceAll(template, "{id}", "x") }

// TestFunctionTokens (defect 2): with KVROUTER_AUTH_TOKENS a function checks the bearer token of each
// request: none → 401, a route token on events → 403, admin → allowed.
func TestFunctionTokens(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte("route route-0123456789abcdef\nadmin admin-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, _, err := Setup(context.Background(), Config{Store: "memory", Pool: "default", BlockSize: 4, StoreTimeout: time.Second, AuthTokens: p})
	if err != nil {
		t.Fatal(err)
	}
	h := NewHandler(a, 0, allEndpoints...)
	ev := `{"worker_id":"w1","event":{"data":{"cleared":{}}}}`
	for _, c := range []struct {
		path, token string
		status      int
	}{
		{"/v1/events", "", 401},
		{"/v1/events", "route-0123456789abcdef", 403},
		{"/v1/events", "admin-0123456789abcdef", 200},
		{"/v1/route", "", 401},
	} {
		hdr := map[string]string{}
		if c.token != "" {
			hdr["authorization"] = "Bearer " + c.token
		}
		r, err := h.HandleHTTP(context.Background(), events.APIGatewayV2HTTPRequest{RawPath: c.path, Body: ev, Headers: hdr,
			RequestContext: events.APIGatewayV2HTTPRequestContext{HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST"}}})
		if err != nil || r.StatusCode != c.status {
			t.Errorf("%s token %q: %d %s (%v), want %d", c.path, c.token, r.StatusCode, r.Body, err, c.status)
		}
	}
	if _, _, err := Setup(context.Background(), Config{Store: "memory", Pool: "default", BlockSize: 4, StoreTimeout: time.Second, AuthTokens: p + ".missing"}); err == nil {
		t.Fatal("a missing tokens file must fail at cold start")
	}
}
