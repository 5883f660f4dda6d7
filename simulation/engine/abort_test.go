package engine

import "testing"

func TestAbortRunningAndWaiting(t *testing.T) {
	e, err := New(Options{BlockSize: 4, NumBlocks: 64, MaxNumSeqs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 3; id++ {
		if err := e.Submit(prompt(id, 16, 8, 4, uint32(id)), 0); err != nil {
			t.Fatal(err)
		}
	}
	now, _ := e.NextEventTime()
	r := e.Step(now) // request 1 prefills and samples its first token; 2 and 3 wait (MaxNumSeqs 1)
	if len(r.FirstTokens) != 1 || r.FirstTokens[0].ID != 1 {
		t.Fatalf("first tokens %+v, want request 1", r.FirstTokens)
	}
	now, _ = e.NextEventTime()
	e.Step(now) // one decode
	if g, ok := e.Generated(1); !ok || g != 2 {
		t.Fatalf("Generated(1) = %d, %v; want 2, true", g, ok)
	}
	if g, ok := e.Generated(2); !ok || g != 0 {
		t.Fatalf("Generated(2) = %d, %v; want 0, true", g, ok)
	}
	if e.Pool().Used() == 0 {
		t.Fatal("a running request holds no blocks")
	}
	if !e.Abort(2) || !e.Abort(1) {
		t.Fatal("Abort of an unfinished request returned false")
	}
	if e.Abort(1) || e.Abort(99) {
		t.Fatal("Abort of an aborted or unknown request returned true")
	}
	if _, ok := e.Generated(1); ok {
		t.Fatal("Generated reports an aborted request")
	}
	if run, wait, _ := e.Active(); run != 0 || wait != 1 {
		t.Fatalf("active %d running, %d waiting; want 0, 1", run, wait)
	}
	if u := e.Pool().Used(); u != 0 {
		t.Fatalf("%d blocks used after aborting the running request\n%s", u, e.Pool().Dump())
	}
	if c := e.Pool().Cached(); c != 4 {
		t.Fatalf("%d blocks cached, want request 1's 4 prompt blocks", c)
	}
	// Request 3 runs to completion alone; the engine then is idle.
	var finished []uint64
	for {
		now, ok := e.NextEventTime()
		if !ok {
			break
		}
		for _, f := range e.Step(now).Finished {
			finished = append(finished, f.ID)
		}
	}
	if len(finished) != 1 || finished[0] != 3 {
		t.Fatalf("finished %v, want [3]", finished)
	}
	// An aborted id may be submitted again.
	if err := e.Submit(prompt(1, 16, 1, 4, 1), now); err != nil {
		t.Fatal(err)
	}
}
