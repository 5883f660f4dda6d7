// Package sim is kvrouter's fleet simulator: a deterministic discrete-event simulation in virtual
// time. Trace arrivals (Workload) drive N engine.Engine workers; a policy picks each request's worker
// — the real core.Router over a statestore (kv, kv-approx, kv-predict, kv-instant-events) or a cache-blind
// baseline (round-robin, random, least-loaded). Workers' KV events reach the router after
// Config.EventDelayMs (kv-instant-events gets them at the instant the block pool changes); prefill_done is
// sent at the first token and done at the last. Run returns a Report (JSON, WriteTable, WriteChart).
//
// Event order at equal virtual times: deliveries to the router (step outputs, KV events) first, then
// arrivals, then engine steps (lowest worker first). Every random draw comes from PCG streams seeded
// by Config.Seed (per policy) and LoadOptions.Seed, so a report is a pure function of its inputs
// unless Config.Timing adds wall-clock decision times. See docs/EVALUATION.md for results.
package sim
