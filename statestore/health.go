package statestore

import "context"

// ReportForward implements Store. PLACEHOLDER: the shared-health helper replaces this with the real
// implementation (consecutive failures, unhealthy back-off, half-open probe) in both stores.
func (m *Memory) ReportForward(_ context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error) {
	return WorkerHealth{State: "healthy"}, nil
}

// ReportForward implements Store. PLACEHOLDER (see Memory.ReportForward).
func (r *Redis) ReportForward(_ context.Context, pool, workerID string, ok bool, nowMs int64) (WorkerHealth, error) {
	return WorkerHealth{State: "healthy"}, nil
}
