package statestore

import (
	"crypto/tls"
	"fmt"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// RedisDialOptions tune the client OpenRedis creates.
type RedisDialOptions struct {
	// Prefix of every key (default "kvr:"); a different prefix is a separate namespace on one Redis.
	Prefix string
	// DialTimeout bounds connecting, default 1 s.
	DialTimeout time.Duration
	// ConnWriteTimeout bounds a command's write and reply (rueidis' dead-connection detection), default
	// 15 s: a large ingest call on a loaded Redis can take seconds. Lambda functions use 1–2 s so that a
	// socket that died while the environment was frozen is noticed quickly.
	ConnWriteTimeout time.Duration
	// BlockingPoolSize is rueidis' pool for blocking commands (none are used), default rueidis' own.
	BlockingPoolSize int
	// RouteScript: RedisOptions.RouteScript (profiling variants). Default "" = the embedded script.
	RouteScript string
	// Limits: RedisOptions.Limits.
	Limits Limits
}

// ParseRedisURL turns a store URL into rueidis options and a display name without credentials.
// Accepted forms:
//   - redis://[user:pass@]host:port[/db], rediss://… (TLS);
//   - comma-separated cluster seeds with or without a scheme: redis://h1:p1,h2:p2 or h1:p1,h2:p2
//     (rueidis detects a cluster);
//   - a Sentinel-managed primary: redis-sentinel://[user:pass@]s1:p1,s2:p2,s3:p3/MASTER[/db]
//     (rediss-sentinel://… with TLS to the sentinels and the data nodes). The addresses are the
//     sentinels'; MASTER is the monitored master set's name; user:pass authenticate to the data
//     nodes (sentinels without requirepass are the common case; add ?sentinel_password=… when they
//     have one). The client follows failovers (+switch-master, plus a 5 s topology refresh);
//   - a server on this host's Unix socket: unix://[user:pass@]/path/to/redis.sock[?db=N], for a router
//     beside its Redis (docs/REDIS.md "Connecting").
func ParseRedisURL(url string) (rueidis.ClientOption, string, error) {
	if scheme, rest, ok := strings.Cut(url, "://"); ok && strings.HasSuffix(scheme, "-sentinel") {
		return parseSentinelURL(url, scheme, rest)
	}
	var opt rueidis.ClientOption
	if strings.Contains(url, ",") || !strings.Contains(url, "://") {
		rest, useTLS := url, false
		switch {
		case strings.HasPrefix(rest, "redis://"):
			rest = strings.TrimPrefix(rest, "redis://")
		case strings.HasPrefix(rest, "rediss://"):
			rest, useTLS = strings.TrimPrefix(rest, "rediss://"), true
		}
		rest = cutCredentials(rest, &opt)
		rest = strings.SplitN(rest, "/", 2)[0]
		addrs, err := parseAddrList(url, rest)
		if err != nil {
			return opt, "", err
		}
		opt.InitAddress = addrs
		if useTLS {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	} else {
		var err error
		if opt, err = rueidis.ParseURL(url); err != nil {
			return opt, "", fmt.Errorf("store %q: %v", url, err)
		}
	}
	scheme := "redis://"
	if strings.HasPrefix(url, "unix://") {
		scheme = "unix://"
	}
	if opt.TLSConfig != nil {
		scheme = "rediss://"
	}
	return opt, scheme + strings.Join(opt.InitAddress, ","), nil
}

// sentinelRefresh is how often a Sentinel client re-reads the primary's address besides reacting to
// +switch-master (rueidis' advice: a missed event would otherwise pin the client to a demoted primary).
const sentinelRefresh = 5 * time.Second

// parseSentinelURL parses redis-sentinel://[user:pass@]s1:p1,…/MASTER[/db][?sentinel_password=…] (rest
// is everything after "://").
func parseSentinelURL(url, scheme, rest string) (rueidis.ClientOption, string, error) {
	var opt rueidis.ClientOption
	switch scheme {
	case "redis-sentinel":
	case "rediss-sentinel":
		opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		opt.Sentinel.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	default:
		return opt, "", fmt.Errorf("store %q: unknown scheme %q (redis-sentinel:// or rediss-sentinel://)", url, scheme)
	}
	rest, query, _ := strings.Cut(rest, "?")
	rest = cutCredentials(rest, &opt)
	hosts, path, _ := strings.Cut(rest, "/")
	addrs, err := parseAddrList(url, hosts)
	if err != nil {
		return opt, "", err
	}
	opt.InitAddress = addrs
	master, db, hasDB := strings.Cut(path, "/")
	if master == "" {
		return opt, "", fmt.Errorf("store %q: no master set name (redis-sentinel://host:port,…/MASTER[/db])", url)
	}
	opt.Sentinel.MasterSet = master
	opt.Sentinel.TopologyRefreshInterval = sentinelRefresh
	if hasDB && db != "" {
		n, err := strconv.Atoi(db)
		if err != nil || n < 0 {
			return opt, "", fmt.Errorf("store %q: bad database number %q", url, db)
		}
		opt.SelectDB = n
	}
	if query != "" {
		q, err := neturl.ParseQuery(query)
		if err != nil {
			return opt, "", fmt.Errorf("store %q: bad query: %v", url, err)
		}
		for k := range q {
			switch k {
			case "sentinel_password":
				opt.Sentinel.Password = q.Get(k)
			case "sentinel_username":
				opt.Sentinel.Username = q.Get(k)
			default:
				return opt, "", fmt.Errorf("store %q: unknown parameter %q (sentinel_username, sentinel_password)", url, k)
			}
		}
	}
	return opt, scheme + "://" + strings.Join(addrs, ",") + "/" + master, nil
}

// cutCredentials moves a leading "user:pass@" or "pass@" of rest into opt and returns what follows.
func cutCredentials(rest string, opt *rueidis.ClientOption) string {
	i := strings.LastIndex(rest, "@")
	if i < 0 {
		return rest
	}
	if u, p, ok := strings.Cut(rest[:i], ":"); ok {
		opt.Username, opt.Password = u, p
	} else {
		opt.Password = rest[:i]
	}
	return rest[i+1:]
}

// parseAddrList splits "h1:p1,h2:p2" into checked host:port addresses (at least one).
func parseAddrList(url, list string) ([]string, error) {
	var out []string
	for _, a := range strings.Split(list, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, fmt.Errorf("store %q: bad address %q: %v", url, a, err)
		}
		out = append(out, a)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("store %q: no Redis address", url)
	}
	return out, nil
}

// OpenRedis creates a rueidis client for url (it dials) and a Redis store over it; Close closes both.
// Connection failures are ErrUnavailable naming the store.
func OpenRedis(url string, o RedisDialOptions) (*Redis, error) {
	opt, name, err := ParseRedisURL(url)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	opt.DisableCache = true // no client-side caching: every read must see the shared state
	opt.Dialer.Timeout = time.Second
	if o.DialTimeout > 0 {
		opt.Dialer.Timeout = o.DialTimeout
	}
	opt.ConnWriteTimeout = 15 * time.Second
	if o.ConnWriteTimeout > 0 {
		opt.ConnWriteTimeout = o.ConnWriteTimeout
	}
	if o.BlockingPoolSize > 0 {
		opt.BlockingPoolSize = o.BlockingPoolSize
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, name, err)
	}
	prefix := o.Prefix
	if prefix == "" {
		prefix = "kvr:"
	}
	st, err := NewRedis(c, RedisOptions{Name: name, Prefix: prefix, RouteScript: o.RouteScript, Limits: o.Limits})
	if err != nil {
		c.Close()
		return nil, err
	}
	return st, nil
}
