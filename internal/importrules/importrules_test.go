package importrules

import (
	"bytes"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const m = "github.com/kvrouter/kvrouter/"

// Patterns are full import paths; a trailing "/..." also matches the subpackages.
const (
	rueidis  = "github.com/redis/rueidis/..."
	fasthttp = "github.com/valyala/fasthttp/..."
	lambda   = "github.com/aws/aws-lambda-go/..."
)

// rule forbids the packages matching from to import anything matching one of forbidden.
type rule struct {
	from      string
	forbidden []string
	why       string
}

// servingLayers are the packages that serve requests or run commands: nothing below them imports them.
var servingLayers = []string{m + "server/...", m + "functions/...", m + "gateway/...", m + "cmd/...", m + "internal/bench/..."}

func with(base []string, more ...string) []string {
	return append(append([]string(nil), base...), more...)
}

var rules = []rule{
	{m + "blockhash", []string{m + "..."}, "a leaf: block identity depends on nothing of ours"},
	{m + "luascripts", []string{m + "..."}, "a leaf: the embedded scripts"},
	{m + "statestore", with(servingLayers, m+"core/...", m+"ingest/...", m+"eventlog/...", m+"simulation/...", m+"tokenizer/..."),
		"the stores sit below the routing model: they know blockhash and luascripts only"},
	{m + "core", with(servingLayers, m+"ingest/...", m+"eventlog/...", m+"simulation/...", "net/http/...", fasthttp, lambda, rueidis),
		"the routing model is transport-free and store-agnostic"},
	{m + "server/api", with(servingLayers[1:], m+"server", m+"simulation/...", fasthttp, lambda, rueidis),
		"the transport-free API layer shared by fasthttp and Lambda"},
	{m + "functions", []string{m + "server", m + "cmd/...", m + "simulation/...", m + "internal/bench/...", fasthttp, rueidis},
		"Lambda handlers only translate (to server/api, and to the gateway's proxy core for the gateway function)"},
	{m + "ingest/...", with(servingLayers, m+"core/...", m+"simulation/...", rueidis),
		"ingest feeds the store interface; it knows nothing of routing or serving"},
	{m + "gateway/...", []string{m + "cmd/...", m + "functions/...", m + "simulation/...", m + "internal/bench/...", rueidis},
		"the OpenAI gateway goes through the store interface"},
	{m + "simulation/...", with(servingLayers, rueidis), "the simulator drives core and the stores, no serving"},
	{m + "eventlog", with(servingLayers, m+"simulation/...", rueidis), "offline event-log tools over the store interface"},
	{m + "internal/bench", []string{m + "server/...", m + "functions/...", m + "gateway/...", m + "cmd/...", rueidis},
		"benchmark drivers use the stores' exported API and child processes"},
	{m + "server", []string{m + "functions/...", m + "cmd/...", m + "simulation/...", m + "internal/bench/...", rueidis},
		"the server wires the API; Redis only through statestore"},
}

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", "../../...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// matches reports whether path is pattern, or under it when pattern ends in "/...".
func matches(path, pattern string) bool {
	if sub, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == sub || strings.HasPrefix(path, sub+"/")
	}
	return path == pattern
}

// TestImportRules fails when a package imports what docs/DESIGN.md forbids it; besides the table,
// only statestore may import rueidis and only cmd/ may import internal/bench, and nothing imports cmd/.
func TestImportRules(t *testing.T) {
	pkgs := listPackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		for _, r := range rules {
			if !matches(p.ImportPath, r.from) {
				continue
			}
			for _, imp := range p.Imports {
				for _, f := range r.forbidden {
					if matches(imp, f) {
						t.Errorf("%s imports %s: forbidden (%s)", p.ImportPath, imp, r.why)
					}
				}
			}
		}
		for _, imp := range p.Imports {
			switch {
			case matches(imp, rueidis) && p.ImportPath != m+"statestore":
				t.Errorf("%s imports %s: only statestore talks to Redis", p.ImportPath, imp)
			case matches(imp, m+"internal/bench") && !matches(p.ImportPath, m+"cmd/..."):
				t.Errorf("%s imports %s: the benchmark drivers are for cmd/ (and tests)", p.ImportPath, imp)
			case matches(imp, m+"cmd/..."):
				t.Errorf("%s imports %s: nothing imports a command", p.ImportPath, imp)
			}
		}
	}
}

// TestMatches pins the pattern semantics the rules rely on.
func TestMatches(t *testing.T) {
	for _, c := range []struct {
		path, pattern string
		want          bool
	}{
		{m + "server", m + "server", true},
		{m + "server/api", m + "server", false},
		{m + "server/api", m + "server/...", true},
		{m + "serverx", m + "server/...", false},
		{m + "gateway", m + "gateway/...", true},
		{"github.com/redis/rueidis/internal/cmds", rueidis, true},
		{"net/http/httptest", "net/http/...", true},
		{"net/http", m + "...", false},
	} {
		if got := matches(c.path, c.pattern); got != c.want {
			t.Errorf("matches(%q, %q) = %v", c.path, c.pattern, got)
		}
	}
}
