package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kvrouter/kvrouter/core"
	"github.com/kvrouter/kvrouter/statestore"
)

// poolEntry is a pool as the gateway caches it.
type poolEntry struct {
	name string
	cfg  statestore.PoolConfig
}

// modelMap is one snapshot of every pool's models (SPEC §7.2 "Model → pool").
type modelMap struct {
	byModel map[string]poolEntry
	models  []modelInfo // sorted by id
	expires time.Time
}

// modelInfo is one entry of GET /v1/models (OpenAI's model object).
type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// modelCache refreshes the model map at most once per TTL, so routing a request costs no extra store
// round trip; a model added with PUT /v1/pools is served within the TTL.
type modelCache struct {
	rt  *core.Router
	ttl time.Duration

	cur atomic.Pointer[modelMap]
	mu  sync.Mutex // one refresh at a time

	urlMu sync.Mutex
	urls  map[string]*workerURLs // pool → its workers' URLs, for tokenize: engine
}

type workerURLs struct {
	urls    []string
	next    int
	expires time.Time
}

func newModelCache(rt *core.Router, ttl time.Duration) *modelCache {
	return &modelCache{rt: rt, ttl: ttl, urls: map[string]*workerURLs{}}
}

// get returns a fresh snapshot, refreshing it when expired.
func (c *modelCache) get(ctx context.Context) (*modelMap, error) {
	if m := c.cur.Load(); m != nil && time.Now().Before(m.expires) {
		return m, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.cur.Load(); m != nil && time.Now().Before(m.expires) {
		return m, nil // another request refreshed it while this one waited
	}
	pools, err := c.rt.Pools(ctx)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	sort.Slice(pools, func(i, j int) bool { return pools[i].Name < pools[j].Name })
	m := &modelMap{byModel: map[string]poolEntry{}, expires: time.Now().Add(c.ttl)}
	for _, p := range pools {
		for _, model := range p.Config.Models {
			if _, dup := m.byModel[model]; dup {
				continue // two pools list the model: the first by name serves it (documented)
			}
			m.byModel[model] = poolEntry{name: p.Name, cfg: p.Config}
			m.models = append(m.models, modelInfo{ID: model, Object: "model", OwnedBy: "kvrouter:" + p.Name})
		}
	}
	sort.Slice(m.models, func(i, j int) bool { return m.models[i].ID < m.models[j].ID })
	c.cur.Store(m)
	return m, nil
}

// pool resolves a request's model to its pool.
func (c *modelCache) pool(ctx context.Context, model string) (poolEntry, bool, error) {
	m, err := c.get(ctx)
	if err != nil {
		return poolEntry{}, false, err
	}
	p, ok := m.byModel[model]
	return p, ok, nil
}

// listResponse answers GET /v1/models.
func (c *modelCache) listResponse(ctx context.Context) *Response {
	m, err := c.get(ctx)
	if err != nil {
		return storeErrorResponse(err)
	}
	data := m.models
	if data == nil {
		data = []modelInfo{}
	}
	b, _ := json.Marshal(struct {
		Object string      `json:"object"`
		Data   []modelInfo `json:"data"`
	}{"list", data})
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &Response{Status: http.StatusOK, Header: h, Body: b}
}

// engineURL picks one of the pool's live workers (round robin) for tokenize: engine; "" when none has a
// URL. The list is cached for the TTL.
func (c *modelCache) engineURL(ctx context.Context, pool string) (string, error) {
	c.urlMu.Lock()
	w := c.urls[pool]
	if w != nil && time.Now().Before(w.expires) {
		u := w.pick()
		c.urlMu.Unlock()
		return u, nil
	}
	c.urlMu.Unlock()
	infos, err := c.rt.Workers(ctx, pool)
	if err != nil {
		return "", fmt.Errorf("list workers of pool %q: %w", pool, err)
	}
	nw := &workerURLs{expires: time.Now().Add(c.ttl)}
	for _, wi := range infos {
		if wi.Live && wi.URL != "" {
			nw.urls = append(nw.urls, wi.URL)
		}
	}
	c.urlMu.Lock()
	defer c.urlMu.Unlock()
	c.urls[pool] = nw
	return nw.pick(), nil
}

func (w *workerURLs) pick() string {
	if len(w.urls) == 0 {
		return ""
	}
	u := w.urls[w.next%len(w.urls)]
	w.next++
	return u
}
