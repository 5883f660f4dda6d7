package api

import (
	"context"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// Metrics are kvrouter's Prometheus metrics (SPEC §7), all prefixed kvrouter_. Labels are bounded: pool
// and worker names (operator-defined), endpoint templates, outcome codes, phases and store operations —
// never request ids, sessions or prefixes. A nil *Metrics records nothing.
type Metrics struct {
	decisions      *prometheus.CounterVec
	decisionTime   *prometheus.HistogramVec
	overlapRatio   *prometheus.HistogramVec
	eventsReceived *prometheus.CounterVec
	eventsApplied  *prometheus.CounterVec
	eventBlocks    *prometheus.CounterVec
	storeTime      *prometheus.HistogramVec
	storeErrors    *prometheus.CounterVec
	carried        prometheus.Counter
	httpRequests   *prometheus.CounterVec
	httpTime       *prometheus.HistogramVec
}

// latencyBuckets span 10 µs .. ~5 s.
var latencyBuckets = prometheus.ExponentialBuckets(10e-6, 2.5, 15)

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_decisions_total",
			Help: "Routing decisions by kind (route, explain), pool and outcome (ok or the error code)."},
			[]string{"kind", "pool", "outcome"}),
		decisionTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_decision_duration_seconds",
			Help:    "Decision latency by phase: total; tokenize (text prompts); hash (decode, hashing, validation: total minus store and tokenize); store (state-store calls).",
			Buckets: latencyBuckets}, []string{"kind", "phase"}),
		overlapRatio: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_decision_overlap_ratio",
			Help:    "Chosen worker's matched prefix blocks / required blocks, per routed request (cache hit ratio).",
			Buckets: []float64{0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1}}, []string{"pool"}),
		eventsReceived: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_events_received_total",
			Help: "KV events received over HTTP by type (stored, removed, cleared, invalid)."}, []string{"type"}),
		eventsApplied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_events_applied_total",
			Help: "KV events by outcome in the store: applied, stale, parent_block_not_found, gap, restart, block_size_mismatch, unknown_worker, invalid."},
			[]string{"status"}),
		eventBlocks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_event_blocks_total",
			Help: "Blocks changed by applied events: stored, removed, block_not_found."}, []string{"op"}),
		storeTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_store_call_duration_seconds",
			Help: "State-store call latency by operation (one Redis script call each with the Redis store).", Buckets: latencyBuckets},
			[]string{"op"}),
		storeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_store_call_errors_total",
			Help: "State-store calls that failed by operation and error code."}, []string{"op", "code"}),
		carried: prometheus.NewCounter(prometheus.CounterOpts{Name: "kvrouter_store_carried_releases_total",
			Help: "Dones carried by route calls (release coalescing, --release-delay) instead of a done call each; a done sent alone counts in kvrouter_store_call_duration_seconds{op=\"done\"}."}),
		httpRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kvrouter_http_requests_total",
			Help: "API requests by endpoint template and status code."}, []string{"endpoint", "code"}),
		httpTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kvrouter_http_request_duration_seconds",
			Help: "API request handling time by endpoint template (body read excluded).", Buckets: latencyBuckets},
			[]string{"endpoint"}),
	}
	reg.MustRegister(m.decisions, m.decisionTime, m.overlapRatio, m.eventsReceived, m.eventsApplied, m.eventBlocks,
		m.storeTime, m.storeErrors, m.carried, m.httpRequests, m.httpTime)
	return m
}

func (m *Metrics) observeHTTP(endpoint string, status int, d time.Duration) {
	if m == nil {
		return
	}
	m.httpRequests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
	m.httpTime.WithLabelValues(endpoint).Observe(d.Seconds())
}

// observeDecision records one decision; outcome is "ok" or an error code.
func (m *Metrics) observeDecision(kind, pool, outcome string, total, tokenize, store time.Duration, d *statestore.Decision) {
	if m == nil {
		return
	}
	if outcome == "unknown_pool" {
		pool = "" // never a label value taken from a request that named no real pool
	}
	m.decisions.WithLabelValues(kind, pool, outcome).Inc()
	if total <= 0 {
		return
	}
	m.decisionTime.WithLabelValues(kind, "total").Observe(total.Seconds())
	m.decisionTime.WithLabelValues(kind, "store").Observe(store.Seconds())
	if tokenize > 0 {
		m.decisionTime.WithLabelValues(kind, "tokenize").Observe(tokenize.Seconds())
	}
	hash := total - store - tokenize
	if hash < 0 {
		hash = 0
	}
	m.decisionTime.WithLabelValues(kind, "hash").Observe(hash.Seconds())
	if d != nil && kind == "route" && d.RequiredBlocks > 0 {
		m.overlapRatio.WithLabelValues(pool).Observe(float64(d.OverlapBlocks) / float64(d.RequiredBlocks))
	}
}

func (m *Metrics) observeEventsRejected(n int) {
	if m == nil {
		return
	}
	m.eventsReceived.WithLabelValues("invalid").Add(float64(n))
	m.eventsApplied.WithLabelValues("invalid").Add(float64(n))
}

func (m *Metrics) observeEventTypes(evs []core.RouterEvent) {
	if m == nil {
		return
	}
	var stored, removed, cleared, other int
	for i := range evs {
		switch eventType(evs[i].Event.Data) {
		case "stored":
			stored++
		case "removed":
			removed++
		case "cleared":
			cleared++
		default:
			other++
		}
	}
	for _, c := range []struct {
		t string
		n int
	}{{"stored", stored}, {"removed", removed}, {"cleared", cleared}, {"invalid", other}} {
		if c.n > 0 {
			m.eventsReceived.WithLabelValues(c.t).Add(float64(c.n))
		}
	}
}

// eventType names an event's data cheaply (no full decode): "stored", "removed", "cleared" or "".
func eventType(data []byte) string {
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case ' ', '\t', '\r', '\n', '{':
			continue
		case '"':
			rest := data[i+1:]
			for _, t := range []string{"stored", "removed", "cleared"} {
				if len(rest) > len(t) && string(rest[:len(t)]) == t && rest[len(t)] == '"' {
					return t
				}
			}
			return ""
		default:
			return ""
		}
	}
	return ""
}

func (m *Metrics) observeEventsApplied(r statestore.ApplyResult, invalid int) {
	if m == nil {
		return
	}
	for _, c := range []struct {
		s string
		n int
	}{{"applied", r.Applied}, {"stale", r.Stale}, {"parent_block_not_found", r.ParentNotFound},
		{"gap", r.Gaps}, {"restart", r.Restarts}, {"block_size_mismatch", r.BlockSizeMismatch},
		{"unknown_worker", r.UnknownWorker}, {"invalid", invalid}} {
		if c.n > 0 {
			m.eventsApplied.WithLabelValues(c.s).Add(float64(c.n))
		}
	}
	for _, c := range []struct {
		s string
		n int
	}{{"stored", r.StoredBlocks}, {"removed", r.RemovedBlocks}, {"block_not_found", r.BlockNotFound}} {
		if c.n > 0 {
			m.eventBlocks.WithLabelValues(c.s).Add(float64(c.n))
		}
	}
}

// DefaultMetricsMaxWorkers is the default cap on per-worker series per pool (--metrics-max-workers).
const DefaultMetricsMaxWorkers = 256

// WorkerCollector reports load gauges at scrape time, read from the store (so every router reports the
// shared truth and removed workers disappear).
//
// Per pool, always (bounded by the number of pools): kvrouter_pool_workers, kvrouter_pool_live_workers,
// kvrouter_pool_degraded_workers, kvrouter_pool_active_prefill_tokens, kvrouter_pool_active_decode_blocks,
// kvrouter_pool_active_requests, kvrouter_pool_cached_blocks (sums over all workers and dp ranks),
// kvrouter_pool_worker_series_omitted (workers beyond the cap below) and kvrouter_pool_reclaim_pending_slots
// (index incarnations still being deleted: statestore.WorkerPage.ReclaimPending), labelled {pool}.
//
// Per worker, for the first maxWorkers workers of each pool in id order (--metrics-max-workers, default
// 256; 0 = none): kvrouter_worker_active_prefill_tokens, kvrouter_worker_active_decode_blocks,
// kvrouter_worker_active_requests, kvrouter_worker_cached_blocks (summed over dp ranks), kvrouter_worker_live
// and kvrouter_worker_degraded, labelled {pool, worker}; and for each of their ranks calibrated by
// cost_model ttft (SPEC §6.6) kvrouter_worker_ttft_prefill_rate, kvrouter_worker_ttft_decode_coeff and
// kvrouter_worker_ttft_samples, labelled {pool, worker, dp_rank}: at most 6 · maxWorkers (+ 3 per
// calibrated rank of those workers) series per pool, however large the fleet.
//
// A scrape reads every worker of every pool to sum the pool gauges, page by page (statestore
// DefaultWorkersPage workers per store call: each call bounded, ceil(W / 32) calls per pool, more for
// workers of over 2 dp ranks: a page holds at most statestore.MaxWorkersPageRanks ranks).
type WorkerCollector struct {
	rt         *core.Router
	timeout    time.Duration
	maxWorkers int
	descs      [6]*prometheus.Desc
	pool       [9]*prometheus.Desc
	ttft       [3]*prometheus.Desc
}

// NewWorkerCollector returns a collector over a router; each scrape lists pools and workers with timeout,
// and reports per-worker series for at most maxWorkers workers per pool (< 0: DefaultMetricsMaxWorkers).
func NewWorkerCollector(rt *core.Router, timeout time.Duration, maxWorkers int) *WorkerCollector {
	if maxWorkers < 0 {
		maxWorkers = DefaultMetricsMaxWorkers
	}
	l, pl, lr := []string{"pool", "worker"}, []string{"pool"}, []string{"pool", "worker", "dp_rank"}
	return &WorkerCollector{rt: rt, timeout: timeout, maxWorkers: maxWorkers, descs: [6]*prometheus.Desc{
		prometheus.NewDesc("kvrouter_worker_active_prefill_tokens", "Booked prefill tokens not yet done, summed over dp ranks.", l, nil),
		prometheus.NewDesc("kvrouter_worker_active_decode_blocks", "Booked decode blocks of active requests, summed over dp ranks.", l, nil),
		prometheus.NewDesc("kvrouter_worker_active_requests", "Active (leased) requests, summed over dp ranks.", l, nil),
		prometheus.NewDesc("kvrouter_worker_cached_blocks", "Blocks indexed from the worker's KV events, summed over dp ranks.", l, nil),
		prometheus.NewDesc("kvrouter_worker_live", "1 if the worker is live (eligible by liveness), else 0.", l, nil),
		prometheus.NewDesc("kvrouter_worker_degraded", "1 if any rank lost events (gap) since its last reset.", l, nil),
	}, pool: [9]*prometheus.Desc{
		prometheus.NewDesc("kvrouter_pool_active_prefill_tokens", "Booked prefill tokens not yet done, summed over the pool's workers and dp ranks.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_active_decode_blocks", "Booked decode blocks of active requests, summed over the pool.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_active_requests", "Active (leased) requests in the pool.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_cached_blocks", "Blocks indexed from KV events, summed over the pool's workers and dp ranks.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_live_workers", "Live workers (eligible by liveness) in the pool.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_degraded_workers", "Workers with a rank that lost events (gap) since its last reset.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_workers", "Registered workers in the pool.", pl, nil),
		prometheus.NewDesc("kvrouter_pool_worker_series_omitted", "Workers of the pool without kvrouter_worker_* series (beyond --metrics-max-workers).", pl, nil),
		prometheus.NewDesc("kvrouter_pool_reclaim_pending_slots", "Index incarnations (removed workers' ranks, restarted engines' old indexes) whose entries are still being deleted, a bounded amount per later call; growing without end means churn faster than reclamation.", pl, nil),
	}, ttft: [3]*prometheus.Desc{
		prometheus.NewDesc("kvrouter_worker_ttft_prefill_rate", "cost_model ttft: the rank's calibrated prefill rate, tokens/s.", lr, nil),
		prometheus.NewDesc("kvrouter_worker_ttft_decode_coeff", "cost_model ttft: the rank's calibrated decode interference, s per active decode block.", lr, nil),
		prometheus.NewDesc("kvrouter_worker_ttft_samples", "cost_model ttft: first tokens the rank's calibration took.", lr, nil),
	}}
}

// Describe implements prometheus.Collector.
func (c *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
	for _, d := range c.pool {
		ch <- d
	}
	for _, d := range c.ttft {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	pools, err := c.rt.Pools(ctx)
	if err != nil {
		return
	}
	for _, p := range pools {
		c.collectPool(ctx, ch, p.Name)
	}
}

// collectPool pages through one pool's workers: per-worker series for the first maxWorkers, sums of all.
// A pool whose listing fails midway reports nothing rather than partial sums.
func (c *WorkerCollector) collectPool(ctx context.Context, ch chan<- prometheus.Metric, pool string) {
	var sum [9]float64 // the pool descs' order
	var series []prometheus.Metric
	q := statestore.WorkersQuery{}
	for {
		pg, err := c.rt.ListWorkers(ctx, pool, q)
		if err != nil {
			return
		}
		sum[8] = float64(pg.ReclaimPending) // (the pool's, on every page)
		for _, w := range pg.Workers {
			var v [6]float64
			for _, r := range w.Ranks {
				v[0] += float64(r.ActivePrefillTokens)
				v[1] += float64(r.ActiveDecodeBlocks)
				v[2] += float64(r.ActiveRequests)
				v[3] += float64(r.CachedBlocks)
				if r.Degraded {
					v[5] = 1
				}
			}
			if w.Live {
				v[4] = 1
			}
			for i := range v {
				sum[i] += v[i]
			}
			sum[6]++
			if int(sum[6]) > c.maxWorkers {
				sum[7]++
				continue
			}
			for i, d := range c.descs {
				series = append(series, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v[i], pool, w.WorkerID))
			}
			for _, r := range w.Ranks {
				if t := r.TTFT; t != nil {
					rank := strconv.Itoa(r.DPRank)
					for i, x := range [3]float64{t.PrefillRate, t.DecodeCoeff, t.Samples} {
						series = append(series, prometheus.MustNewConstMetric(c.ttft[i], prometheus.GaugeValue, x, pool, w.WorkerID, rank))
					}
				}
			}
		}
		if pg.Next == "" {
			break
		}
		q.After = pg.Next
	}
	for _, m := range series {
		ch <- m
	}
	for i, d := range c.pool {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, sum[i], pool)
	}
}
