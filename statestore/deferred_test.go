package statestore

import (
	"context"
	"errors"
	"testing"
)

// TestDeferred: before Connect succeeds every call answers ErrUnavailable (naming the store and the last
// open's error) without opening; a failed Connect keeps it so; a successful one hands every later call
// to the opened store; Close closes it and stops later Connects.
func TestDeferred(t *testing.T) {
	ctx := context.Background()
	opens, fail := 0, errors.New("dial tcp: connection refused")
	var opened *Memory
	open := func() (Store, error) {
		opens++
		if fail != nil {
			return nil, fail
		}
		opened = NewMemory()
		return opened, nil
	}
	d := NewDeferred("redis://10.0.0.1:6379", open, fail)
	if _, err := d.GetPool(ctx, "p"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("GetPool before Connect: %v, want ErrUnavailable", err)
	}
	if _, err := d.Route(ctx, RouteRequest{Pool: "p"}); !errors.Is(err, ErrUnavailable) || opens != 0 {
		t.Fatalf("Route before Connect: %v after %d opens, want ErrUnavailable and no open", err, opens)
	}
	if d.Name() != "redis://10.0.0.1:6379" || d.Connected() {
		t.Fatalf("name %q, open %v before Connect", d.Name(), d.Connected())
	}
	if err := d.Connect(ctx); !errors.Is(err, ErrUnavailable) || opens != 1 {
		t.Fatalf("Connect while unreachable: %v after %d opens", err, opens)
	}
	fail = nil
	if err := d.Connect(ctx); err != nil || !d.Connected() {
		t.Fatalf("Connect once reachable: %v (open %v)", err, d.Connected())
	}
	if err := d.Connect(ctx); err != nil || opens != 2 {
		t.Fatalf("a second Connect: %v after %d opens, want nil and no new open", err, opens)
	}
	if err := d.PutPool(ctx, "p", DefaultPoolConfig(16)); err != nil {
		t.Fatal(err)
	}
	if _, err := opened.GetPool(ctx, "p"); err != nil {
		t.Fatalf("the pool did not reach the opened store: %v", err)
	}
	if d.Name() != opened.Name() {
		t.Fatalf("name %q after Connect, want the opened store's %q", d.Name(), opened.Name())
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	// Closed before it ever connected: Connect no longer opens.
	d2 := NewDeferred("x", open, nil)
	d2.Close()
	if err := d2.Connect(ctx); !errors.Is(err, ErrUnavailable) || opens != 2 {
		t.Fatalf("Connect after Close: %v after %d opens", err, opens)
	}
}

// TestOpenOrDefer: the embedded store opens (nothing pending), a bad URL is an error, and a Redis nobody
// listens at is a Deferred whose Err names the unavailable store; a nil pending Connects as a no-op.
func TestOpenOrDefer(t *testing.T) {
	st, pending, err := OpenOrDefer("memory", OpenOptions{})
	if err != nil || pending != nil || st == nil {
		t.Fatalf("memory: %v, pending %v", err, pending)
	}
	if err := pending.Connect(context.Background()); err != nil {
		t.Fatalf("Connect of no pending store: %v", err)
	}
	if _, _, err := OpenOrDefer("redis://no port here", OpenOptions{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a bad URL: %v, want ErrInvalid", err)
	}
	st, pending, err = OpenOrDefer("redis://127.0.0.1:1", OpenOptions{})
	if err != nil || pending == nil || st != Store(pending) {
		t.Fatalf("an unreachable Redis: %v, pending %v", err, pending)
	}
	if e := pending.Err(); !errors.Is(e, ErrUnavailable) || st.Name() != "redis://127.0.0.1:1" {
		t.Fatalf("Err %v, name %q", e, st.Name())
	}
	st.Close()
}
