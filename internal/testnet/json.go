package testnet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// DoJSON sends a request with a JSON body (nil: none) and, when token is not empty, a bearer token;
// it decodes a 2xx JSON answer into out (nil: discarded) and turns any other status into an error that
// quotes the body.
func DoJSON(c *http.Client, method, url, token string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: status %d: %s", method, url, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}

// WaitFor polls cond every interval until it returns "" or timeout has passed; it then fails the test
// with cond's last description of what is still wrong. The interval paces polling; it is not a timing
// assumption.
func WaitFor(t testing.TB, timeout, interval time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached within %v: %s", what, timeout, msg)
		}
		time.Sleep(interval)
	}
}
