package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvrouter/kvrouter/server/api"
)

// Access is the access control shared by serve and ingest (SPEC §7.3).
type Access struct {
	// AuthTokens is the tokens file (--auth-tokens, KVROUTER_AUTH_TOKENS): "SCOPE TOKEN" lines, scopes
	// route and admin (api.LoadTokens). Default "": no tokens, allowed only on a loopback address.
	AuthTokens string `yaml:"auth_tokens"`
	// InsecureNoAuth allows a non-loopback address without tokens (logged as a warning). Default false.
	InsecureNoAuth bool `yaml:"insecure_no_auth"`
	// MetricsAddr, when set, serves /metrics on its own listener (host:port, e.g. a private interface)
	// instead of the main one. Default "": /metrics on the main address, open like /healthz.
	MetricsAddr string `yaml:"metrics_addr"`
}

// errNoAuth: a non-loopback listen address without tokens.
var errNoAuth = errors.New("refusing to listen on a non-loopback address without --auth-tokens (give a tokens file, bind 127.0.0.1, or pass --insecure-no-auth)")

// tokens loads the tokens file and applies the bind rule for addr: nil tokens means no access control
// (a loopback address, or InsecureNoAuth, warned about).
func (a Access) tokens(addr string, log *slog.Logger) (*api.Tokens, error) {
	if a.AuthTokens != "" {
		t, err := api.LoadTokens(a.AuthTokens)
		if err != nil {
			return nil, fmt.Errorf("invalid configuration: %v", err)
		}
		return t, nil
	}
	if isLoopback(addr) {
		return nil, nil
	}
	if !a.InsecureNoAuth {
		return nil, fmt.Errorf("invalid configuration: addr %s: %w", addr, errNoAuth)
	}
	log.Warn("no access control: anyone who reaches this address may create pools, register workers and post events (--insecure-no-auth)", "addr", addr)
	return nil, nil
}

// isLoopback reports whether a host:port listen address binds only loopback interfaces ("localhost",
// 127.0.0.0/8, ::1). An empty host or 0.0.0.0 binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// requireTokens wraps a net/http handler with the scope check of each path (api.ScopeOf).
func requireTokens(t *api.Tokens, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if e := t.Check(r.Header.Get("Authorization"), api.ScopeOf(r.URL.EscapedPath())); e != nil {
			for k, v := range api.HeadersFor(e.Status) {
				w.Header().Set(k, v)
			}
			w.WriteHeader(e.Status)
			fmt.Fprintf(w, `{"error":{"code":%q,"message":%q}}`+"\n", e.Code, e.Msg)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// serveMetrics serves g's /metrics on addr until ctx ends; it returns once listening (or failing to).
func serveMetrics(ctx context.Context, addr string, g prometheus.Gatherer, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen metrics-addr %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		c, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(c)
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return nil
}
