package core

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/kvrouter/kvrouter/blockhash"
	"github.com/kvrouter/kvrouter/statestore"
)

// MaxReplayLine bounds one replay line, bytes.
const MaxReplayLine = 64 << 20

// Replay runs a replay file (SPEC §7.1) against a store in virtual time and writes one JSON line per
// route, explain, query and report_forward line, and one per bad line. The output depends only on the
// file: it is byte-identical for every store. Transport errors of the store end the run.
func Replay(ctx context.Context, store statestore.Store, in io.Reader, out io.Writer) error {
	var clock int64
	rt := New(store, Options{Now: func() int64 { return clock }, Random: func() float64 { return 0 }, PoolCacheTTL: -1})
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), MaxReplayLine)
	w := bufio.NewWriter(out)
	defer w.Flush()
	line := 0
	for sc.Scan() {
		line++
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 || raw[0] == '#' {
			continue
		}
		res, err := replayLine(ctx, rt, &clock, line, raw)
		if err != nil && isTransport(err) {
			return fmt.Errorf("replay: line %d: %w", line, err)
		}
		if err != nil && res == nil {
			res = map[string]any{"line": line, "error": errBody(err)}
		}
		if res != nil {
			b, mErr := json.Marshal(res)
			if mErr != nil {
				return fmt.Errorf("replay: line %d: %w", line, mErr)
			}
			w.Write(b)
			w.WriteByte('\n')
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("replay: read line %d: %w", line+1, err)
	}
	return nil
}

// isTransport reports errors that are not an expected outcome of a line (the store failed).
func isTransport(err error) bool {
	return statestore.ErrorCode(err) == "internal" || errors.Is(err, statestore.ErrUnavailable)
}

func errBody(err error) statestore.ErrorBody {
	return statestore.ErrorBody{Code: statestore.ErrorCode(err), Message: err.Error()}
}

// replayDecision is the printed shape of a decision.
type replayDecision struct {
	RequestID      string  `json:"request_id"`
	WorkerID       string  `json:"worker_id"`
	DPRank         int     `json:"dp_rank"`
	OverlapBlocks  int     `json:"overlap_blocks"`
	RequiredBlocks int64   `json:"required_blocks"`
	Cost           float64 `json:"cost"`
}

type replayQuery struct {
	LocalHashes []Hash   `json:"local_hashes,omitempty"`
	TokenIDs    []uint32 `json:"token_ids,omitempty"`
	LoRAName    string   `json:"lora_name,omitempty"`
}

// replayReport is the body of a report_forward line: a forward's outcome for a worker's shared health.
type replayReport struct {
	Pool     string `json:"pool,omitempty"`
	WorkerID string `json:"worker_id"`
	OK       *bool  `json:"ok"`
}

// replayHealth is the printed outcome of a report_forward line.
type replayHealth struct {
	WorkerID string                   `json:"worker_id"`
	Health   *statestore.WorkerHealth `json:"health,omitempty"`
	Error    *statestore.ErrorBody    `json:"error,omitempty"`
}

var replayKeys = []string{"config", "worker", "remove_worker", "event", "route", "explain", "query", "prefill_done", "done",
	"report_forward", "advance_ms"}

func replayLine(ctx context.Context, rt *Router, clock *int64, line int, raw []byte) (any, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%w: line %d: not a JSON object: %v", statestore.ErrInvalid, line, err)
	}
	key := ""
	for _, k := range replayKeys {
		if _, ok := obj[k]; ok {
			if key != "" {
				return nil, fmt.Errorf("%w: line %d: holds both %q and %q", statestore.ErrInvalid, line, key, k)
			}
			key = k
		}
	}
	for k := range obj {
		if k != key && k != "pool" && k != "random" {
			return nil, fmt.Errorf("%w: line %d: unknown key %q", statestore.ErrInvalid, line, k)
		}
	}
	if key == "" {
		return nil, fmt.Errorf("%w: line %d: no known key (want one of %v)", statestore.ErrInvalid, line, replayKeys)
	}
	var pool string
	if p, ok := obj["pool"]; ok {
		if err := json.Unmarshal(p, &pool); err != nil {
			return nil, fmt.Errorf("%w: line %d: pool must be a string", statestore.ErrInvalid, line)
		}
	}
	pool = poolName(pool)
	bad := func(what string, err error) error {
		return fmt.Errorf("%w: line %d: %s: %s", statestore.ErrInvalid, line, what, jsonErr(err))
	}
	body := obj[key]
	switch key {
	case "config":
		base, err := rt.store.GetPool(ctx, pool)
		if errors.Is(err, statestore.ErrUnknownPool) {
			base, err = statestore.DefaultPoolConfig(0), nil
		}
		if err != nil {
			return nil, err
		}
		cfg, err := ParsePoolConfig(base, body)
		if err != nil {
			return nil, err
		}
		return nil, rt.PutPool(ctx, pool, cfg)
	case "worker":
		var wi WorkerInput
		if err := strictUnmarshal(body, &wi); err != nil {
			return nil, bad("worker", err)
		}
		return nil, rt.PutWorker(ctx, wi.Pool, wi.Spec(), wi.BlockSize)
	case "remove_worker":
		var id FlexString
		if err := json.Unmarshal(body, &id); err != nil {
			return nil, bad("remove_worker", err)
		}
		return nil, rt.RemoveWorker(ctx, pool, string(id))
	case "event":
		var ev RouterEvent
		if err := strictUnmarshal(body, &ev); err != nil {
			return nil, bad("event", err)
		}
		ev.Pool = pool
		_, evErrs, err := rt.ApplyRouterEvents(ctx, []RouterEvent{ev})
		if err != nil {
			return nil, err
		}
		if len(evErrs) > 0 {
			return nil, fmt.Errorf("%w: line %d: event: %s", statestore.ErrInvalid, line, evErrs[0].Error)
		}
		return nil, nil
	case "route", "explain":
		var in RouteInput
		if err := strictUnmarshal(body, &in); err != nil {
			return nil, bad(key, err)
		}
		if in.RequestID == "" {
			in.RequestID = fmt.Sprintf("req-%d", line)
		}
		r := 0.0
		if rr, ok := obj["random"]; ok {
			if err := json.Unmarshal(rr, &r); err != nil {
				return nil, bad("random", err)
			}
		}
		in.Random = &r
		if key == "explain" {
			ex, err := rt.Explain(ctx, in)
			if err != nil {
				if isTransport(err) {
					return nil, err
				}
				return map[string]any{"request_id": in.RequestID, "error": errBody(err)}, nil
			}
			// A paged explain (Redis, over 128 ranks) is a snapshot here: nothing else runs between its
			// calls in a replay, and the output must not depend on the store.
			ex.Pages, ex.Snapshot = 0, nil
			return ex, nil
		}
		d, err := rt.Route(ctx, in)
		if err != nil {
			if isTransport(err) {
				return nil, err
			}
			return map[string]any{"request_id": in.RequestID, "error": errBody(err)}, nil
		}
		return replayDecision{RequestID: d.RequestID, WorkerID: d.WorkerID, DPRank: d.DPRank,
			OverlapBlocks: d.OverlapBlocks, RequiredBlocks: d.RequiredBlocks, Cost: d.Cost}, nil
	case "query":
		var q replayQuery
		if err := strictUnmarshal(body, &q); err != nil {
			return nil, bad("query", err)
		}
		local := make([]uint64, len(q.LocalHashes))
		for i, h := range q.LocalHashes {
			local[i] = uint64(h)
		}
		if len(q.TokenIDs) > 0 {
			cfg, err := rt.PoolConfig(ctx, pool)
			if err != nil {
				return nil, err
			}
			local = blockhash.LocalHashes(local[:0], q.TokenIDs, cfg.BlockSize, blockhash.LoRASeed(q.LoRAName))
		}
		scores, err := rt.Overlap(ctx, pool, local)
		if err != nil {
			return nil, err
		}
		if scores == nil {
			scores = []statestore.Score{}
		}
		return map[string]any{"scores": scores}, nil
	case "prefill_done", "done":
		var id string
		if err := json.Unmarshal(body, &id); err != nil {
			return nil, bad(key, err)
		}
		p := ""
		if _, ok := obj["pool"]; ok {
			p = pool
		}
		var err error
		if key == "done" {
			_, err = rt.Done(ctx, p, id)
		} else {
			_, err = rt.PrefillDone(ctx, p, id)
		}
		return nil, err
	case "report_forward":
		var rep replayReport
		if err := strictUnmarshal(body, &rep); err != nil {
			return nil, bad(key, err)
		}
		if rep.OK == nil {
			return nil, fmt.Errorf("%w: line %d: report_forward needs \"ok\": true|false", statestore.ErrInvalid, line)
		}
		if rep.Pool == "" {
			rep.Pool = pool
		}
		h, err := rt.ReportForward(ctx, rep.Pool, rep.WorkerID, *rep.OK)
		if err != nil {
			if isTransport(err) {
				return nil, err
			}
			eb := errBody(err)
			return replayHealth{WorkerID: rep.WorkerID, Error: &eb}, nil
		}
		return replayHealth{WorkerID: rep.WorkerID, Health: &h}, nil
	case "advance_ms":
		var n int64
		if err := json.Unmarshal(body, &n); err != nil || n < 0 {
			return nil, fmt.Errorf("%w: line %d: advance_ms must be a non-negative integer", statestore.ErrInvalid, line)
		}
		*clock += n
		return nil, nil
	}
	return nil, nil
}
