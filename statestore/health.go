package statestore

import (
	"context"
	"fmt"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Worker health (SPEC §7.2 "Retries and health"). The rules, shared by both stores (report_forward.lua
// and route.lua mirror them; the differential and replay tests hold them to it):
//
//   - A failed forward adds 1 to the worker's consecutive failures; an ok forward resets the worker to
//     healthy (failures 0, no back-off), whatever its state.
//   - With unhealthy_after = K > 0: the failure that brings the count to K or more while the worker is
//     not marked marks it unhealthy until now + unhealthy_backoff_ms (its back-off B starts at
//     unhealthy_backoff_ms). Failures reported inside the window only count (they are late reports of
//     forwards made before the mark).
//   - From until on the worker is half-open: the first Route that books it takes the probe (probe until
//     now + B) and every other decision skips it until a report arrives or the probe times out (then the
//     next decision may probe). A failure reported at or after until (the probe, or any late failure)
//     doubles B, capped at MaxBackoffFactor × unhealthy_backoff_ms, and marks it unhealthy until now + B.
//   - K = 0 turns tracking off: failures are still counted (and shown), but nothing is marked and
//     routing ignores any earlier mark.
//   - Health belongs to the registration: re-registering (a heartbeat) keeps it, removing the worker
//     drops it (a worker registered again after removal starts healthy).

// healthRec is a worker's stored health: times in ms on the callers' clock, 0 = unset.
type healthRec struct {
	fails   int64 // consecutive failed forwards
	until   int64 // end of the back-off window (0: not marked)
	probe   int64 // end of the running probe (0: none)
	backoff int64 // current back-off, ms (0: not marked)
}

// state returns the health state at now for a pool whose unhealthy_after is ua.
func (h healthRec) state(now, ua int64) string {
	switch {
	case ua == 0 || h.until == 0:
		return HealthHealthy
	case now < h.until:
		return HealthUnhealthy
	case now < h.probe:
		return HealthProbing
	}
	return HealthHalfOpen
}

// blocked reports whether routing skips the worker (filter reason "unhealthy").
func (h healthRec) blocked(now, ua int64) bool {
	s := h.state(now, ua)
	return s == HealthUnhealthy || s == HealthProbing
}

// report applies one forward outcome at now under the pool's knobs.
func (h *healthRec) report(ok bool, now int64, cfg *PoolConfig) {
	if ok {
		*h = healthRec{}
		return
	}
	h.fails++
	if cfg.UnhealthyAfter == 0 {
		return
	}
	switch {
	case h.until == 0:
		if h.fails >= cfg.UnhealthyAfter {
			h.backoff = cfg.UnhealthyBackoffMs
			h.until, h.probe = now+h.backoff, 0
		}
	case now >= h.until: // half-open or probing: the probe (or a late forward) failed
		h.backoff = min(2*h.backoff, MaxBackoffFactor*cfg.UnhealthyBackoffMs)
		h.until, h.probe = now+h.backoff, 0
	}
}

// takeProbe is called when a decision books the worker: a half-open worker becomes probing.
func (h *healthRec) takeProbe(now, ua int64) {
	if h.state(now, ua) == HealthHalfOpen {
		h.probe = now + h.backoff
	}
}

// info is the reported shape at now.
func (h healthRec) info(now, ua int64) WorkerHealth {
	return WorkerHealth{ConsecutiveFailures: h.fails, UnhealthyUntilMs: h.until, ProbeUntilMs: h.probe,
		BackoffMs: h.backoff, State: h.state(now, ua)}
}

func unknownWorker(pool, workerID string) error {
	return fmt.Errorf("%w: %q in pool %q", ErrUnknownWorker, workerID, pool)
}

// ReportForward implements Store.
func (m *Memory) ReportForward(_ context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error) {
	if err := CheckID("worker_id", workerID); err != nil {
		return WorkerHealth{}, err
	}
	p, err := m.pool(pool)
	if err != nil {
		return WorkerHealth{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.workers[workerID]
	if w == nil {
		return WorkerHealth{}, unknownWorker(pool, workerID)
	}
	w.health.report(ok, nowMs, &p.cfg)
	p.healthChanged(w)
	return w.health.info(nowMs, p.cfg.UnhealthyAfter), nil
}

// ReportForward implements Store: one report_forward.lua call.
func (r *Redis) ReportForward(ctx context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error) {
	if err := CheckID("worker_id", workerID); err != nil {
		return WorkerHealth{}, err
	}
	okArg := "0"
	if ok {
		okArg = "1"
	}
	arr, err := r.exec(ctx, luascripts.ReportForward, pool, []string{istr(nowMs), workerID, okArg, istr(MaxBackoffFactor)})
	if err != nil {
		return WorkerHealth{}, err
	}
	switch msgStr(arr[0]) {
	case "unknown_pool":
		return WorkerHealth{}, unknownPool(pool)
	case "unknown_worker":
		return WorkerHealth{}, unknownWorker(pool, workerID)
	case "ok":
		h := healthRec{fails: msgInt(arr[1]), until: msgInt(arr[2]), probe: msgInt(arr[3]), backoff: msgInt(arr[4])}
		return h.info(nowMs, msgInt(arr[5])), nil
	}
	return WorkerHealth{}, fmt.Errorf("statestore: redis report_forward: unexpected reply %q", msgStr(arr[0]))
}
