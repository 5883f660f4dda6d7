package statestore

import (
	"crypto/tls"
	"fmt"
	"net"
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
}

// ParseRedisURL turns a store URL into rueidis options and a display name without credentials.
// Accepted forms: redis://[user:pass@]host:port[/db], rediss://… (TLS), and comma-separated cluster
// seeds with or without a scheme: redis://h1:p1,h2:p2 or h1:p1,h2:p2 (rueidis detects a cluster).
func ParseRedisURL(url string) (rueidis.ClientOption, string, error) {
	var opt rueidis.ClientOption
	if strings.Contains(url, ",") || !strings.Contains(url, "://") {
		rest, useTLS := url, false
		switch {
		case strings.HasPrefix(rest, "redis://"):
			rest = strings.TrimPrefix(rest, "redis://")
		case strings.HasPrefix(rest, "rediss://"):
			rest, useTLS = strings.TrimPrefix(rest, "rediss://"), true
		}
		if i := strings.LastIndex(rest, "@"); i >= 0 {
			cred := rest[:i]
			rest = rest[i+1:]
			if u, p, ok := strings.Cut(cred, ":"); ok {
				opt.Username, opt.Password = u, p
			} else {
				opt.Password = cred
			}
		}
		rest = strings.SplitN(rest, "/", 2)[0]
		for _, a := range strings.Split(rest, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return opt, "", fmt.Errorf("store %q: bad address %q: %v", url, a, err)
			}
			opt.InitAddress = append(opt.InitAddress, a)
		}
		if len(opt.InitAddress) == 0 {
			return opt, "", fmt.Errorf("store %q: no Redis address", url)
		}
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
	if opt.TLSConfig != nil {
		scheme = "rediss://"
	}
	return opt, scheme + strings.Join(opt.InitAddress, ","), nil
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
	st, err := NewRedis(c, RedisOptions{Name: name, Prefix: prefix, RouteScript: o.RouteScript})
	if err != nil {
		c.Close()
		return nil, err
	}
	return st, nil
}
