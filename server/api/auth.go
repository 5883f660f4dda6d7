package api

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
)

// Scope is what a bearer token may call (SPEC §7.3).
type Scope int

const (
	// ScopeOpen needs no token: /healthz, /readyz, and /metrics where it is served.
	ScopeOpen Scope = iota
	// ScopeRoute: route, explain, prefill_done/done, the OpenAI endpoints.
	ScopeRoute
	// ScopeAdmin: pools, workers, events, ingest streams, debug endpoints — and everything route may call.
	ScopeAdmin
)

func (s Scope) String() string {
	switch s {
	case ScopeOpen:
		return "open"
	case ScopeRoute:
		return "route"
	}
	return "admin"
}

// minTokenBytes is the shortest token a tokens file may hold: 16 bytes (128 bits of a random hex or
// base64 string is the intent; shorter ones are guessable).
const minTokenBytes = 16

// ScopeOf returns the scope a request for rawPath needs. Paths it does not know need admin, so a new
// endpoint is closed until classified.
func ScopeOf(rawPath string) Scope {
	p, _, _ := strings.Cut(rawPath, "?")
	switch Endpoint(p) {
	case "/healthz", "/readyz":
		return ScopeOpen
	case "/v1/route", "/v1/route/explain", "/v1/requests/{id}/prefill_done", "/v1/requests/{id}/done":
		return ScopeRoute
	}
	switch strings.TrimRight(p, "/") {
	case "/metrics":
		return ScopeOpen
	case "/v1/completions", "/v1/chat/completions", "/v1/models":
		return ScopeRoute
	}
	return ScopeAdmin
}

// Tokens are the bearer tokens a service accepts, each with its scope. Only SHA-256 digests are kept, so
// a token never reaches a log or a heap dump by accident. Safe for concurrent use (read-only).
type Tokens struct {
	digests [][sha256.Size]byte
	scopes  []Scope
}

// LoadTokens reads a tokens file (--auth-tokens, KVROUTER_AUTH_TOKENS): one "SCOPE TOKEN" per line,
// SCOPE route or admin; blank lines and lines starting with '#' are skipped. Errors name the file and
// line, never the token.
func LoadTokens(path string) (*Tokens, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("auth-tokens: %w", err)
	}
	defer f.Close()
	return ParseTokens(f, path)
}

// ParseTokens parses a tokens file's content (LoadTokens); name labels errors. At least one token.
func ParseTokens(r io.Reader, name string) (*Tokens, error) {
	t := &Tokens{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("auth-tokens %s line %d: want \"SCOPE TOKEN\" (SCOPE route or admin)", name, n)
		}
		var s Scope
		switch f[0] {
		case "route":
			s = ScopeRoute
		case "admin":
			s = ScopeAdmin
		default:
			return nil, fmt.Errorf("auth-tokens %s line %d: unknown scope %q (route or admin)", name, n, trimForError(f[0]))
		}
		if len(f[1]) < minTokenBytes {
			return nil, fmt.Errorf("auth-tokens %s line %d: token shorter than %d bytes", name, n, minTokenBytes)
		}
		t.digests = append(t.digests, sha256.Sum256([]byte(f[1])))
		t.scopes = append(t.scopes, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("auth-tokens %s: %w", name, err)
	}
	if len(t.digests) == 0 {
		return nil, fmt.Errorf("auth-tokens %s: no tokens", name)
	}
	return t, nil
}

func trimForError(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// Len is the number of tokens (0 for nil).
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	return len(t.digests)
}

// AuthError is a refused request: Status 401 (no or unknown token; Code "unauthenticated") or 403
// (a token of too small a scope; Code "permission_denied").
type AuthError struct {
	Status int
	Code   string
	Msg    string
}

func (e *AuthError) Error() string { return e.Msg }

// Check authorises a request whose Authorization header is authorization for a need-scope endpoint.
// A nil Tokens, or an open endpoint, allows everything. The presented token is compared with every
// configured one in constant time (digests of equal length; no early exit).
func (t *Tokens) Check(authorization string, need Scope) *AuthError {
	if t == nil || need == ScopeOpen {
		return nil
	}
	scheme, tok, ok := strings.Cut(strings.TrimSpace(authorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "" {
		return &AuthError{http.StatusUnauthorized, "unauthenticated",
			fmt.Sprintf("this endpoint needs a %s token: send Authorization: Bearer TOKEN", need)}
	}
	d := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	got := ScopeOpen
	for i := range t.digests {
		eq := subtle.ConstantTimeCompare(d[:], t.digests[i][:])
		got = Scope(subtle.ConstantTimeSelect(eq&boolInt(t.scopes[i] > got), int(t.scopes[i]), int(got)))
	}
	switch {
	case got == ScopeOpen:
		return &AuthError{http.StatusUnauthorized, "unauthenticated", "unknown bearer token"}
	case got < need:
		return &AuthError{http.StatusForbidden, "permission_denied",
			fmt.Sprintf("this endpoint needs a %s token; the token given has scope %s", need, got)}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Authorizer returns Check for a fixed scope in the shape of gateway.Options.Authorize (status 0:
// allowed). A nil Tokens returns nil (no access control).
func (t *Tokens) Authorizer(need Scope) func(authorization string) (status int, code, msg string) {
	if t == nil {
		return nil
	}
	return func(authorization string) (int, string, string) {
		if e := t.Check(authorization, need); e != nil {
			return e.Status, e.Code, e.Msg
		}
		return 0, "", ""
	}
}
