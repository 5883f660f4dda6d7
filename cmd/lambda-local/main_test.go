package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvrouter/kvrouter/internal/testredis"
)

// samples are functions/testdata's events in play order: KV events, two routes, done.
var samples = []string{"function_url_events.json", "function_url_route.json", "apigw_v2_route.json", "apigw_v2_done.json"}

// invoke runs lambda-local on the sample events and returns the responses' status codes and bodies.
func invoke(t *testing.T, env map[string]string, args ...string) ([]int, []string, string) {
	t.Helper()
	for _, s := range samples {
		args = append(args, filepath.Join("..", "..", "functions", "testdata", s))
	}
	var out, errs bytes.Buffer
	if err := run(context.Background(), args, func(k string) string { return env[k] }, &out, &errs); err != nil {
		t.Fatalf("%v\n%s", err, errs.String())
	}
	var codes []int
	var bodies []string
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r struct {
			StatusCode int    `json:"statusCode"`
			Body       string `json:"body"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		codes, bodies = append(codes, r.StatusCode), append(bodies, r.Body)
	}
	if len(codes) != len(samples) {
		t.Fatalf("%d responses for %d events:\n%s", len(codes), len(samples), out.String())
	}
	return codes, bodies, errs.String()
}

var workers = []string{"--worker", "w0=http://w0:8000", "--worker", "w1=http://w1:8000", "--worker", "w2=http://w2:8000"}

// checkSamples: the events are applied, both routes pick w1 (which holds the prefix) and done finds
// the first route's lease — what functions' own tests expect of the same events.
func checkSamples(t *testing.T, codes []int, bodies []string) {
	t.Helper()
	for i, c := range codes {
		if c != 200 {
			t.Fatalf("%s: %d %s", samples[i], c, bodies[i])
		}
	}
	for i, want := range []string{`"applied":2`, `"worker_id":"w1"`, `"worker_id":"w1"`, `"found":true`} {
		if !strings.Contains(bodies[i], want) {
			t.Errorf("%s: %s, want %s", samples[i], bodies[i], want)
		}
	}
}

func TestLocalInvokeMemory(t *testing.T) {
	codes, bodies, log := invoke(t, nil, append([]string{"--block-size", "4"}, workers...)...)
	checkSamples(t, codes, bodies)
	if !strings.Contains(log, "apigw_v2_done.json → 200") {
		t.Errorf("stderr: %s", log)
	}
}

// TestLocalInvokeOneFunction: --function route serves only /v1/route, as the deployed RouteFunction.
func TestLocalInvokeOneFunction(t *testing.T) {
	codes, _, _ := invoke(t, map[string]string{"KVROUTER_BLOCK_SIZE": "4"}, append([]string{"--function", "route"}, workers...)...)
	if codes[0] == 200 || codes[1] != 200 || codes[2] != 200 || codes[3] == 200 {
		t.Fatalf("statuses %v: want only the two routes served", codes)
	}
}

// TestLocalInvokeRedis: the same events through a real redis-server, configured like a deployment
// (KVROUTER_STORE in the environment).
func TestLocalInvokeRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server: skipped in -short mode")
	}
	srv := testredis.Start(t)
	codes, bodies, _ := invoke(t, map[string]string{"KVROUTER_STORE": srv.URL(), "KVROUTER_BLOCK_SIZE": "4"}, workers...)
	checkSamples(t, codes, bodies)
}

func TestLocalInvokeErrors(t *testing.T) {
	for _, args := range [][]string{{}, {"--function", "nosuch", "x.json"}, {"--worker", "w0", "x.json"}, {"/nonexistent.json"}} {
		var out, errs bytes.Buffer
		if err := run(context.Background(), args, func(string) string { return "" }, &out, &errs); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
