package server

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// With an endpoint, spans are exported over OTLP/HTTP (flushed at shutdown); without one, a no-op.
func TestTracingExportsOTLP(t *testing.T) {
	got := make(chan int, 16)
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			got <- len(b)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()
	ctx := context.Background()
	tp, shutdown, err := Tracing(ctx, collector.URL+"/v1/traces", "kvrouter-test")
	if err != nil {
		t.Fatal(err)
	}
	_, span := tp.Tracer("t").Start(ctx, "kvrouter.route")
	span.End()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n == 0 {
			t.Error("empty export")
		}
	default:
		t.Fatal("no OTLP export reached the collector by shutdown")
	}
	noop, stop, err := Tracing(ctx, "", "x")
	if err != nil || stop(ctx) != nil {
		t.Fatal(err)
	}
	_, s := noop.Tracer("t").Start(ctx, "x")
	if s.SpanContext().IsValid() {
		t.Error("no-op provider produced a real span")
	}
}
