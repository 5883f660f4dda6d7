package api

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// One span per decision, carrying the chosen worker, overlap and cost.
func TestDecisionSpan(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	rt := core.New(statestore.NewMemory(), core.Options{})
	ctx := context.Background()
	rt.PutPool(ctx, "default", statestore.DefaultPoolConfig(4))
	rt.PutWorker(ctx, "default", statestore.WorkerSpec{WorkerID: "w0", URL: "u"}, 0)
	a := New(rt, Options{Tracer: tp.Tracer("test")})
	if r := a.Do(ctx, Request{Method: "POST", RawPath: "/v1/route", Body: []byte(`{"request_id":"r1","token_ids":[1,2,3,4,5]}`)}); r.Status != 200 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	if r := a.Do(ctx, Request{Method: "POST", RawPath: "/v1/route", Body: []byte(`{"pool":"nope"}`)}); r.Status != 404 {
		t.Fatalf("%d %s", r.Status, r.Body)
	}
	spans := exp.GetSpans()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range spans[0].Attributes {
		attrs[kv.Key] = kv.Value
	}
	if spans[0].Name != "kvrouter.route" || attrs["kvrouter.worker_id"].AsString() != "w0" ||
		attrs["kvrouter.required_blocks"].AsInt64() != 2 || attrs["kvrouter.cost"].Type() != attribute.FLOAT64 ||
		attrs["kvrouter.overlap_blocks"].Type() != attribute.INT64 || attrs["kvrouter.request_id"].AsString() != "r1" {
		t.Errorf("span %s attributes %v", spans[0].Name, spans[0].Attributes)
	}
	if spans[1].Status.Description != "unknown_pool" {
		t.Errorf("error span status %+v", spans[1].Status)
	}
}
