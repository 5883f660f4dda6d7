package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// ServiceOptions configure the ingest service's HTTP handler.
type ServiceOptions struct {
	// Manager supplies the subscribers' Stats for /metrics and /v1/ingest/streams. Required.
	Manager *Manager
	// API answers /v1/events (POST, custom engines) and the read-only /v1/workers, /v1/pools and
	// /v1/route/explain; nil: those paths are 404. Typically the server API over the same store.
	API http.Handler
	// Ready reports whether the state store is reachable (/readyz). Nil: always ready.
	Ready func(ctx context.Context) error
	// Gatherer is scraped by /metrics; nil: a private registry with the ingest collector only.
	Gatherer prometheus.Gatherer
	// NoMetrics leaves /metrics out (served on a separate address). Default false.
	NoMetrics bool
	// MaxBodyBytes bounds a POST /v1/events body; default 64 MiB.
	MaxBodyBytes int64
}

// NewServiceHandler returns the ingest service's HTTP handler: /healthz, /readyz, /metrics,
// GET /v1/ingest/streams (every subscriber's Stats as JSON) and the API paths of opts.API.
func NewServiceHandler(opts ServiceOptions) http.Handler {
	if opts.MaxBodyBytes == 0 {
		opts.MaxBodyBytes = 64 << 20
	}
	g := opts.Gatherer
	if g == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewCollector(opts.Manager))
		g = reg
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"ok"}`+"\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if opts.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := opts.Ready(ctx); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": "unavailable", "message": "state store: " + err.Error()}})
				w.Write(append(b, '\n'))
				return
			}
		}
		io.WriteString(w, `{"status":"ready"}`+"\n")
	})
	if !opts.NoMetrics {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.HandleFunc("GET /v1/ingest/streams", func(w http.ResponseWriter, r *http.Request) {
		b, _ := json.Marshal(opts.Manager.Stats())
		w.Header().Set("Content-Type", "application/json")
		w.Write(append(b, '\n'))
	})
	if opts.API != nil {
		api := http.MaxBytesHandler(opts.API, opts.MaxBodyBytes)
		mux.Handle("POST /v1/events", api)
		mux.Handle("GET /v1/workers", api)
		mux.Handle("GET /v1/pools", api)
		mux.Handle("POST /v1/route/explain", api)
	}
	return mux
}

// Collector exports the subscribers' Stats as Prometheus metrics (names prefixed kvrouter_ingest_,
// labels pool, worker, dp_rank). Read at scrape time; label cardinality is the number of streams.
type Collector struct {
	m     *Manager
	descs map[string]*prometheus.Desc
}

var streamLabels = []string{"pool", "worker", "dp_rank"}

// collectorMetrics: name → help, extra label (if any).
var collectorMetrics = []struct {
	name, help, label string
	gauge             bool
}{
	{"events_total", "KV events decoded from engine messages, by type (stored, removed, cleared, unknown).", "type", false},
	{"event_outcomes_total", "What the store did with the ingested events, by outcome (applied, stale, parent_block_not_found, block_not_found, gap, restart, block_size_mismatch, unknown_worker, unhashable).", "outcome", false},
	{"blocks_total", "Blocks stored or removed in the index, by op.", "op", false},
	{"messages_total", "ZMQ messages received live.", "", false},
	{"malformed_messages_total", "Messages whose frames or payload did not decode (dropped).", "", false},
	{"oversized_messages_total", "Connections closed because the engine declared a ZMQ frame or message beyond the size limit (also counted malformed).", "", false},
	{"gaps_total", "Live messages that arrived after a missing sequence number.", "", false},
	{"missed_messages_total", "Messages missing across gaps.", "", false},
	{"replays_total", "Replay requests sent to the engine's ROUTER socket.", "", false},
	{"replay_failures_total", "Replay requests that failed.", "", false},
	{"replayed_messages_total", "Messages recovered by replay and applied.", "", false},
	{"lost_messages_total", "Messages never applied (not replayable, or malformed).", "", false},
	{"restarts_total", "Engine restarts detected (sequence went backwards, replay mismatch, or an idle restart probe).", "", false},
	{"restart_probes_total", "Restart probes sent to the engine's replay socket (after a reconnect, and while idle).", "", false},
	{"reconnects_total", "Connection attempts after the first.", "", false},
	{"apply_errors_total", "Failed store calls (each retried).", "", false},
	{"connected", "1 while the subscriber's PUB connection is up.", "", true},
	{"lag_ms", "Now minus the engine timestamp of the last applied batch, ms (clock skew included).", "", true},
	{"queue_depth", "Decoded messages waiting for the store.", "", true},
	{"last_seq", "Sequence number of the last message handed to the store.", "", true},
}

// NewCollector returns a collector over m's subscribers.
func NewCollector(m *Manager) *Collector {
	c := &Collector{m: m, descs: map[string]*prometheus.Desc{}}
	for _, d := range collectorMetrics {
		labels := streamLabels
		if d.label != "" {
			labels = append(append([]string(nil), streamLabels...), d.label)
		}
		c.descs[d.name] = prometheus.NewDesc("kvrouter_ingest_"+d.name, d.help, labels, nil)
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.m.Stats() {
		lv := []string{st.Key.Pool, st.Key.WorkerID, strconv.Itoa(st.Key.DPRank)}
		emit := func(name string, v float64, extra ...string) {
			typ := prometheus.CounterValue
			for _, d := range collectorMetrics {
				if d.name == name && d.gauge {
					typ = prometheus.GaugeValue
				}
			}
			ch <- prometheus.MustNewConstMetric(c.descs[name], typ, v, append(lv[:3:3], extra...)...)
		}
		ev := st.Events
		for typ, v := range map[string]int{"stored": ev.Stored, "removed": ev.Removed, "cleared": ev.Cleared, "unknown": ev.Unknown} {
			emit("events_total", float64(v), typ)
		}
		a := st.Applied
		for out, v := range map[string]int{"applied": a.Applied, "stale": a.Stale, "parent_block_not_found": a.ParentNotFound,
			"block_not_found": a.BlockNotFound, "gap": a.Gaps, "restart": a.Restarts, "block_size_mismatch": a.BlockSizeMismatch,
			"unknown_worker": a.UnknownWorker, "unhashable": ev.Unhashable} {
			emit("event_outcomes_total", float64(v), out)
		}
		emit("blocks_total", float64(a.StoredBlocks), "stored")
		emit("blocks_total", float64(a.RemovedBlocks), "removed")
		emit("messages_total", float64(st.Messages))
		emit("malformed_messages_total", float64(st.Malformed))
		emit("oversized_messages_total", float64(st.Oversized))
		emit("gaps_total", float64(st.Gaps))
		emit("missed_messages_total", float64(st.MissedMessages))
		emit("replays_total", float64(st.Replays))
		emit("replay_failures_total", float64(st.ReplayFailures))
		emit("replayed_messages_total", float64(st.ReplayedMessages))
		emit("lost_messages_total", float64(st.LostMessages))
		emit("restarts_total", float64(st.Restarts))
		emit("restart_probes_total", float64(st.RestartProbes))
		emit("reconnects_total", float64(st.Reconnects))
		emit("apply_errors_total", float64(st.ApplyErrors))
		emit("connected", b2f(st.Connected))
		emit("lag_ms", float64(st.LagMs))
		emit("queue_depth", float64(st.QueueDepth))
		emit("last_seq", float64(st.LastSeq))
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// ParseEngineSpec parses one --engine value: "w1=tcp://host:5557[,replay=tcp://host:5558][,dp=0]
// [,url=http://host:8000][,topic=T]". It returns the subscriber settings (Pool and BlockSize left to
// the caller) and the worker's URL.
func ParseEngineSpec(spec string) (cfg SubscriberConfig, url string, err error) {
	name, rest, ok := cutString(spec, "=")
	if !ok || name == "" {
		return cfg, "", fmt.Errorf("--engine %q: want WORKER=tcp://host:port[,replay=…][,dp=N][,url=…]", spec)
	}
	cfg.WorkerID = name
	parts := splitComma(rest)
	cfg.Endpoint = parts[0]
	for _, p := range parts[1:] {
		k, v, ok := cutString(p, "=")
		if !ok {
			return cfg, "", fmt.Errorf("--engine %q: option %q: want key=value", spec, p)
		}
		switch k {
		case "replay":
			cfg.ReplayEndpoint = v
		case "dp":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return cfg, "", fmt.Errorf("--engine %q: dp %q: want an integer >= 0", spec, v)
			}
			cfg.DPRank = n
		case "url":
			url = v
		case "topic":
			cfg.Topic = v
		default:
			return cfg, "", fmt.Errorf("--engine %q: unknown option %q (replay, dp, url, topic)", spec, k)
		}
	}
	if !validEndpoint(cfg.Endpoint) {
		return cfg, "", fmt.Errorf("--engine %q: endpoint %q: want tcp://host:port or ipc://path", spec, cfg.Endpoint)
	}
	return cfg, url, nil
}

func cutString(s, sep string) (string, string, bool) {
	for i := 0; i+len(sep) <= len(s); i++ {
		if s[i:i+len(sep)] == sep {
			return s[:i], s[i+len(sep):], true
		}
	}
	return s, "", false
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
