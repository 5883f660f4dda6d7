package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/kvrouter/kvrouter/statestore"
)

func init() { openRedisStore = openRedis }

// redisClientOption turns a --store value into rueidis options. Accepted forms:
// redis://[user:pass@]host:port[/db], rediss://… (TLS), and comma-separated cluster seeds with or
// without a scheme: redis://h1:p1,h2:p2 or h1:p1,h2:p2 (rueidis detects a cluster by itself).
func redisClientOption(url string) (rueidis.ClientOption, string, error) {
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
		rest = strings.TrimSuffix(strings.SplitN(rest, "/", 2)[0], "/")
		for _, a := range strings.Split(rest, ",") {
			a = strings.TrimSpace(a)
			if a == "" {
				continue
			}
			if _, _, err := net.SplitHostPort(a); err != nil {
				return opt, "", fmt.Errorf("--store %q: bad address %q: %v", url, a, err)
			}
			opt.InitAddress = append(opt.InitAddress, a)
		}
		if len(opt.InitAddress) == 0 {
			return opt, "", fmt.Errorf("--store %q: no Redis address", url)
		}
		if useTLS {
			opt.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	} else {
		var err error
		if opt, err = rueidis.ParseURL(url); err != nil {
			return opt, "", fmt.Errorf("--store %q: %v", url, err)
		}
	}
	scheme := "redis://"
	if opt.TLSConfig != nil {
		scheme = "rediss://"
	}
	return opt, scheme + strings.Join(opt.InitAddress, ","), nil
}

func openRedis(ctx context.Context, url string, opts storeOptions) (statestore.Store, error) {
	opt, name, err := redisClientOption(url)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true
	opt.Dialer.Timeout = time.Second
	// Large ingest calls (2048 blocks) on a loaded box can take longer than rueidis' write/read deadline;
	// KVROUTER_REDIS_TIMEOUT (a Go duration) overrides the default of 15 s.
	opt.ConnWriteTimeout = 15 * time.Second
	if v := os.Getenv("KVROUTER_REDIS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("KVROUTER_REDIS_TIMEOUT %q: want a positive Go duration", v)
		}
		opt.ConnWriteTimeout = d
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", statestore.ErrUnavailable, name, err)
	}
	prefix := "kvr:"
	if opts.fresh { // replay, bench: a private namespace
		var b [6]byte
		rand.Read(b[:])
		prefix = "kvr:run-" + hex.EncodeToString(b[:]) + ":"
	}
	st, err := statestore.NewRedis(c, statestore.RedisOptions{Name: name, Prefix: prefix})
	if err != nil {
		c.Close()
		return nil, err
	}
	return st, nil
}
