package statestore

// SetApplyWorkBudget sets apply_events' work budget (Redis commands per call) for a test and returns the
// restore function. Tests that use it must not run in parallel with other Redis tests of the package.
func SetApplyWorkBudget(n int) (restore func()) {
	old := applyWorkBudget
	applyWorkBudget = n
	return func() { applyWorkBudget = old }
}
