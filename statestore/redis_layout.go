package statestore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/luascripts"
)

// Key-layout administration (SPEC §8 "Layout version"): every pool's cfg hash records the layout that
// wrote it (field "layout"; none = layout 1); the operations answer *LayoutMismatchError for any other.
// MigratePool converts a pool (moving it from layouts 1–5's hash tag first); RecreatePool drops its state
// and declares it again.
//
// Layout 6 moved every pool to a new hash tag (redis_keys.go PoolTag), so a pool of layouts 1–5 is not
// where this layout looks. Two markers keep the versions from missing each other silently:
//   - this layout, finding no pool at its tag (an operation's unknown_pool, GetPool, PutPool), reads the
//     pool's cfg at the old tag (legacyMismatch): a pool there is a *LayoutMismatchError naming its layout;
//   - every pool of this layout leaves a tombstone at the old tag (writeTombstone: cfg = {layout: 6,
//     moved: new tag}), so a router of layouts 2–5 meeting it answers layout_mismatch (its cfg check) and
//     never declares a pool of its own beside it.

// tombstoneField marks a legacy cfg key that holds only a tombstone (its value: the pool's tag now).
const tombstoneField = "moved"

// legacyLayout returns the layout recorded by a pool layouts 1–5 wrote at pool's old tag ("1" when its cfg
// has no layout field), or "" when there is none (no key, or only this layout's tombstone).
func (r *Redis) legacyLayout(ctx context.Context, pool string) (string, error) {
	k := legacyCfgKey(r.prefix, pool)
	res := r.c.DoMulti(ctx, r.c.B().Exists().Key(k).Build(), r.c.B().Hmget().Key(k).Field("layout", tombstoneField).Build())
	n, err := res[0].AsInt64()
	if err != nil {
		return "", r.wrap("layout check", err)
	}
	f, err := res[1].ToArray()
	if err != nil {
		return "", r.wrap("layout check", err)
	}
	if n == 0 || len(f) < 2 || !f[1].IsNil() {
		return "", nil
	}
	if v, err := f[0].ToString(); err == nil && v != "" {
		return v, nil
	}
	return "1", nil
}

// legacyMismatch returns a *LayoutMismatchError when layouts 1–5 wrote pool at their tag, nil when they
// did not (or the probe's error).
func (r *Redis) legacyMismatch(ctx context.Context, pool string) error {
	v, err := r.legacyLayout(ctx, pool)
	if err != nil {
		return err
	}
	if v == "" {
		return nil
	}
	return &LayoutMismatchError{Pool: pool, Found: v, Want: strconv.Itoa(luascripts.Layout)}
}

// writeTombstone records at pool's old tag that the pool lives at its layout-6 tag (idempotent: PutPool
// writes it on every declaration, MigratePool after the move).
func (r *Redis) writeTombstone(ctx context.Context, pool string) error {
	cmd := r.c.B().Hset().Key(legacyCfgKey(r.prefix, pool)).FieldValue().
		FieldValue("layout", strconv.Itoa(luascripts.Layout)).FieldValue(tombstoneField, PoolTag(pool)).Build()
	if err := r.c.Do(ctx, cmd).Error(); err != nil {
		return r.wrap("layout tombstone", err)
	}
	return nil
}

// moveLegacyKeys moves every key of a pool layouts 1–5 wrote from their tag to this layout's (DUMP,
// RESTORE … REPLACE, UNLINK, recreateBatch keys at a time: the two tags hash to different cluster slots,
// so RENAME cannot), cfg last, then leaves the tombstone. Routers and ingest of the old layout must be
// stopped (docs/REDIS.md "Layout 6"). Re-run after an interruption it carries on: until cfg has moved the
// pool is still the old layout's, and the keys already moved are overwritten again. A pool found at both
// tags is refused (ErrConflict): recreate it.
func (r *Redis) moveLegacyKeys(ctx context.Context, pool string) error {
	src, dst := legacyBase(r.prefix, pool), poolBase(r.prefix, pool)
	srcCfg, dstCfg := src+luascripts.KeySuffixes[0], dst+luascripts.KeySuffixes[0]
	n, err := r.c.Do(ctx, r.c.B().Exists().Key(dstCfg).Build()).AsInt64()
	if err != nil {
		return r.wrap("migrate", err)
	}
	if n > 0 {
		return fmt.Errorf("%w: pool %q exists under both layout %d's key tag and the earlier layouts' one: "+
			"run `kvrouter pool recreate %s`", ErrConflict, pool, luascripts.Layout, pool)
	}
	err = r.eachKeyBatch(ctx, src, func(keys []string) error {
		return r.moveKeys(ctx, slices.DeleteFunc(keys, func(k string) bool { return k == srcCfg }), src, dst)
	})
	if err != nil {
		return err
	}
	if err := r.moveKeys(ctx, []string{srcCfg}, src, dst); err != nil {
		return err
	}
	return r.writeTombstone(ctx, pool)
}

// moveKeys moves keys (all under src) to the same names under dst, keeping their expiries.
func (r *Redis) moveKeys(ctx context.Context, keys []string, src, dst string) error {
	if len(keys) == 0 {
		return nil
	}
	read := make(rueidis.Commands, 0, 2*len(keys))
	for _, k := range keys {
		read = append(read, r.c.B().Dump().Key(k).Build(), r.c.B().Pttl().Key(k).Build())
	}
	res := r.c.DoMulti(ctx, read...)
	write := make(rueidis.Commands, 0, len(keys))
	var moved []string
	for i, k := range keys {
		blob, err := res[2*i].ToString()
		if rueidis.IsRedisNil(err) {
			continue // gone since the SCAN
		}
		if err != nil {
			return r.wrap("migrate dump", err)
		}
		ttl, err := res[2*i+1].AsInt64()
		if err != nil {
			return r.wrap("migrate pttl", err)
		}
		if ttl < 0 {
			ttl = 0 // no expiry
		}
		write = append(write, r.c.B().Restore().Key(dst+strings.TrimPrefix(k, src)).Ttl(ttl).SerializedValue(blob).Replace().Build())
		moved = append(moved, k)
	}
	for _, x := range r.c.DoMulti(ctx, write...) {
		if err := x.Error(); err != nil {
			return r.wrap("migrate restore", err)
		}
	}
	if len(moved) > 0 { // one slot (the old tag's): one command
		if err := r.c.Do(ctx, r.c.B().Unlink().Key(moved...).Build()).Error(); err != nil {
			return r.wrap("migrate unlink", err)
		}
	}
	return nil
}

// maxMigrateSteps bounds MigratePool's calls; each migrate.lua step is O(1) or a bounded slice of work.
const maxMigrateSteps = 1 << 20

// MigratePool brings a pool written by the previous key layout to this one (migrate.lua, called until it
// answers done; each call bounded). It returns the layout the pool had. A pool of a layout with no
// conversion is ErrConflict naming `pool recreate`.
func (r *Redis) MigratePool(ctx context.Context, pool string) (from string, err error) {
	legacy, err := r.legacyLayout(ctx, pool)
	if err != nil {
		return "", err
	}
	if legacy != "" {
		if err := r.moveLegacyKeys(ctx, pool); err != nil {
			return "", err
		}
	}
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

// RecreatePool drops every key of a pool, whatever layout wrote it (under this layout's tag and under
// layouts 1–5's), and declares it again with the knobs it had: workers register again (ingest re-registers
// the workers it serves, SPEC §8) and events refill the index. Keys are found with SCAN … MATCH <pool's
// key pattern> on every node and unlinked recreateBatch at a time; the cfg keys go last, so until then
// every operation on the pool keeps answering layout_mismatch (none writes), then PutPool re-declares it
// in this layout. Leases, sessions and loads of the old pool are gone. It returns the layout the pool had.
func (r *Redis) RecreatePool(ctx context.Context, pool string) (from string, err error) {
	base, oldBase := poolBase(r.prefix, pool), legacyBase(r.prefix, pool)
	cfgKey, oldCfg := base+luascripts.KeySuffixes[0], oldBase+luascripts.KeySuffixes[0]
	cfg, from, err := r.readPoolConfigAt(ctx, cfgKey)
	if err == nil && from == "" { // not at this layout's tag: layouts 1–5's (their tombstone is no pool)
		if from, err = r.legacyLayout(ctx, pool); err == nil && from != "" {
			cfg, _, err = r.readPoolConfigAt(ctx, oldCfg)
		}
	}
	if err != nil {
		return "", err
	}
	if from == "" {
		return "", unknownPool(pool)
	}
	if err := r.dropKeys(ctx, oldBase, oldCfg); err != nil {
		return "", err
	}
	if err := r.dropKeys(ctx, base, cfgKey); err != nil {
		return "", err
	}
	for _, x := range r.c.DoMulti(ctx, r.c.B().Del().Key(cfgKey).Build(), r.c.B().Del().Key(oldCfg).Build()) { // two slots
		if err := x.Error(); err != nil {
			return "", r.wrap("recreate", err)
		}
	}
	if err := r.PutPool(ctx, pool, cfg); err != nil {
		return "", err
	}
	return from, nil
}

// eachKeyBatch calls fn with the keys under base, one SCAN … MATCH page (about recreateBatch keys) at a
// time, on every node.
func (r *Redis) eachKeyBatch(ctx context.Context, base string, fn func(keys []string) error) error {
	pattern := globEscape(base) + "*"
	for _, n := range r.c.Nodes() {
		cursor := uint64(0)
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(pattern).Count(recreateBatch).Build()).AsScanEntry()
			if err != nil {
				return r.wrap("pool scan", err)
			}
			if len(e.Elements) > 0 {
				if err := fn(e.Elements); err != nil {
					return err
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// dropKeys unlinks every key under base but keep.
func (r *Redis) dropKeys(ctx context.Context, base, keep string) error {
	return r.eachKeyBatch(ctx, base, func(keys []string) error {
		del := slices.DeleteFunc(keys, func(k string) bool { return k == keep })
		if len(del) == 0 {
			return nil
		}
		if err := r.c.Do(ctx, r.c.B().Unlink().Key(del...).Build()).Error(); err != nil { // one slot: one command
			return r.wrap("recreate unlink", err)
		}
		return nil
	})
}
