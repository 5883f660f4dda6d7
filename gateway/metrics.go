package gateway

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the gateway's Prometheus metrics, prefixed kvrouter_gateway_. Labels are bounded: pool and
// worker names (operator-defined; pool "" for requests that named no served model), HTTP status codes,
// and fixed reason words — never models, request ids or sessions. A nil *Metrics records nothing.
type Metrics struct {
	requests *prometheus.CounterVec
	retries  *prometheus.CounterVec
	failures *prometheus.CounterVec
	ttft     *prometheus.HistogramVec
	duration *prometheus.HistogramVec
}

// Failure reasons (label "reason" of retries and upstream failures).
const (
	reasonConnect   = "connect"    // dial failed, refused, or no free pooled connection in time
	reason429       = "status_429" // the worker is saturated (retried, not a health failure)
	reason503       = "status_503" // the worker is unavailable (retried, a health failure)
	reason5xx       = "status_5xx" // another 5xx (not retried, a health failure)
	reasonTimeout   = "timeout"    // no byte within the idle timeout
	reasonMidStream = "mid_stream" // the stream broke after it started
	reasonProtocol  = "protocol"   // a malformed answer or another transport error
)

// StatusClientGone is the code label of requests whose client disconnected before the answer ended
// (nginx's 499).
const StatusClientGone = 499

// gatewayBuckets span 100 µs .. ~100 s (engines' time to first token and generation times).
var gatewayBuckets = prometheus.ExponentialBuckets(100e-6, 2.5, 14)

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_gateway_requests_total",
			Help: "OpenAI-compatible gateway requests by pool and final status code (499: the client disconnected)."},
			[]string{"pool", "code"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_gateway_retries_total",
			Help: "Requests routed again after a failed forward, by pool and reason (connect, status_429, status_503)."},
			[]string{"pool", "reason"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_gateway_upstream_failures_total",
			Help: "Failed forwards by pool, worker and reason (connect, status_429, status_503, status_5xx, timeout, mid_stream, protocol)."},
			[]string{"pool", "worker", "reason"}),
		ttft: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_gateway_time_to_first_token_seconds",
			Help:    "From the request's arrival to the first streamed data chunk (the whole answer when not streaming), by pool.",
			Buckets: gatewayBuckets}, []string{"pool"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_gateway_upstream_duration_seconds",
			Help:    "From sending the request to the worker to the end of its answer, by pool.",
			Buckets: gatewayBuckets}, []string{"pool"}),
	}
	reg.MustRegister(m.requests, m.retries, m.failures, m.ttft, m.duration)
	return m
}

func (m *Metrics) request(pool string, status int) {
	if m != nil {
		m.requests.WithLabelValues(pool, strconv.Itoa(status)).Inc()
	}
}

func (m *Metrics) retry(pool, reason string) {
	if m != nil {
		m.retries.WithLabelValues(pool, reason).Inc()
	}
}

func (m *Metrics) failure(pool, worker, reason string) {
	if m != nil {
		m.failures.WithLabelValues(pool, worker, reason).Inc()
	}
}

func (m *Metrics) firstToken(pool string, d time.Duration) {
	if m != nil {
		m.ttft.WithLabelValues(pool).Observe(d.Seconds())
	}
}

func (m *Metrics) upstream(pool string, d time.Duration) {
	if m != nil {
		m.duration.WithLabelValues(pool).Observe(d.Seconds())
	}
}
