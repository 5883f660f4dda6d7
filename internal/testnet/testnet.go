// Package testnet holds network helpers for tests.
package testnet

import (
	"net"
	"testing"
)

// RefusedURL returns an http:// URL on a loopback port nothing listens on: connecting is refused (the
// port was free a moment ago; another process taking it in between is possible but unlikely).
func RefusedURL(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}
