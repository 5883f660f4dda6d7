package statestore

import (
	"context"
	"fmt"
	"strings"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Key-layout administration (SPEC §8 "Layout version"): every pool's cfg hash records the layout that
// wrote it (field "layout"; none = layout 1); the operations answer *LayoutMismatchError for any other.
// MigratePool converts a pool in place; RecreatePool drops its state and declares it again.

// maxMigrateSteps bounds MigratePool's calls; each migrate.lua step is O(1) or a bounded slice of work.
const maxMigrateSteps = 1 << 20

// MigratePool brings a pool written by the previous key layout to this one (migrate.lua, called until it
// answers done; each call bounded). It returns the layout the pool had. A pool of a layout with no
// conversion is ErrConflict naming `pool recreate`.
func (r *Redis) MigratePool(ctx context.Context, pool string) (from string, err error) {
	for step := 0; step < maxMigrateSteps; step++ {
		arr, err := r.exec(ctx, luascripts.Migrate, pool, nil)
		if err != nil {
			return "", err
		}
		switch msgStr(arr[0]) {
		case "unknown_pool":
			return "", unknownPool(pool)
		case "done":
			return msgStr(arr[1]), nil
		case "more":
			continue
		case "unsupported":
			return "", fmt.Errorf("%w: pool %q was written by key layout %s, which layout %d cannot convert: "+
				"run `kvrouter pool recreate %s`", ErrConflict, pool, msgStr(arr[1]), luascripts.Layout, pool)
		default:
			return "", fmt.Errorf("statestore: redis migrate: unexpected reply %q", msgStr(arr[0]))
		}
	}
	return "", fmt.Errorf("statestore: redis migrate %q: not done after %d steps", pool, maxMigrateSteps)
}

// recreateBatch is the keys one SCAN step asks for and one UNLINK deletes.
const recreateBatch = 512

// RecreatePool drops every key of a pool, whatever layout wrote it, and declares it again with the
// knobs it had: workers register again (ingest re-registers the workers it serves, SPEC §8) and events
// refill the index. Keys are found with SCAN … MATCH <pool's key pattern> on every node and unlinked
// recreateBatch at a time; cfg goes last, so until then every operation on the pool keeps answering
// layout_mismatch (none writes), then PutPool re-declares it in this layout. Leases, sessions and loads
// of the old pool are gone. It returns the layout the pool had.
func (r *Redis) RecreatePool(ctx context.Context, pool string) (from string, err error) {
	cfg, from, err := r.readPoolConfig(ctx, pool)
	if err != nil {
		return "", err
	}
	keys := PoolKeys(r.prefix, pool)
	cfgKey := keys[0]
	pattern := globEscape(strings.TrimSuffix(cfgKey, "cfg")) + "*"
	for _, n := range r.c.Nodes() {
		cursor := uint64(0)
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(recreateBatch).Build()).AsScanEntry()
			if err != nil {
				return "", r.wrap("recreate scan", err)
			}
			var del []string
			for _, k := range e.Elements {
				if k != cfgKey {
					del = append(del, k)
				}
			}
			if len(del) > 0 { // one slot: the client sends it to the slot's primary
				if err := r.c.Do(ctx, r.c.B().Unlink().Key(del...).Build()).Error(); err != nil {
					return "", r.wrap("recreate unlink", err)
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	if err := r.c.Do(ctx, r.c.B().Del().Key(cfgKey).Build()).Error(); err != nil {
		return "", r.wrap("recreate", err)
	}
	if err := r.PutPool(ctx, pool, cfg); err != nil {
		return "", err
	}
	return from, nil
}
