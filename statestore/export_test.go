package statestore

// SetApplyWorkBudget sets apply_events' work budget (Redis commands per call) for a test and returns the
// restore function. Tests that use it must not run in parallel with other Redis tests of the package.
func SetApplyWorkBudget(n int) (restore func()) {
	old := applyWorkBudget
	applyWorkBudget = n
	return func() { applyWorkBudget = old }
}

// SetExplainPaging sets a Redis store's explain page size (candidates per call; 0 = ExplainPageCandidates)
// and a hook run before each page after the first (nil: none), so tests page small pools and change the
// roster between two pages deterministically.
func SetExplainPaging(r *Redis, page int, between func(page int)) {
	r.explainPage, r.explainBetween = page, between
}
