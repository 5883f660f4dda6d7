package statestore

// SetExplainPaging sets a Redis store's explain page size (candidates per call; 0 = ExplainPageCandidates)
// and a hook run before each page after the first (nil: none), so tests page small pools and change the
// roster between two pages deterministically.
func SetExplainPaging(r *Redis, page int, between func(page int)) {
	r.explainPage, r.explainBetween = page, between
}
