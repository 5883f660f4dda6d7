package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json), build events included.
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output and build-fail events
	Test       string
	Output     string
}

// skip is one skipped test and the message it skipped with.
type skip struct {
	Package, Test, Message string
	Allowed                string // the allow-list's reason, "" when not on the list
}

// allowRule is one line of the allow-list: a package (module-relative path) and a test pattern.
type allowRule struct {
	pkg    string
	test   *regexp.Regexp
	reason string
}

// parseAllowList reads "PACKAGE TEST-REGEXP REASON…" lines ('#' starts a comment line). The test
// pattern is anchored at both ends; PACKAGE is the import path without the module prefix.
func parseAllowList(text string) ([]allowRule, error) {
	var rules []allowRule
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("allow-list line %d: want PACKAGE TEST-REGEXP REASON, got %q", i+1, line)
		}
		re, err := regexp.Compile("^(?:" + f[1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("allow-list line %d: %w", i+1, err)
		}
		rules = append(rules, allowRule{pkg: f[0], test: re, reason: strings.Join(f[2:], " ")})
	}
	return rules, nil
}

// summary consumes the event stream: it echoes what plain `go test` prints (package result lines,
// build errors, the output of failed tests) and remembers every skip.
type summary struct {
	out    io.Writer
	module string // module path prefix stripped from package names ("github.com/kvrouter/kvrouter/")
	rules  []allowRule

	buf    map[string][]string // package + "\x00" + test → its output lines so far
	order  []string            // buf's keys in order of first output (to flush unfinished tests)
	skips  []skip
	failed bool
}

func newSummary(out io.Writer, module string, rules []allowRule) *summary {
	return &summary{out: out, module: module, rules: rules, buf: map[string][]string{}}
}

// consume reads events until EOF. A line that is not JSON (go vet, a crashed test binary) is echoed.
func (s *summary) consume(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Action == "" {
			fmt.Fprintln(s.out, sc.Text())
			continue
		}
		s.handle(e)
	}
	return sc.Err()
}

func (s *summary) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(s.out, e.Output)
	case e.Action == "build-fail":
		s.failed = true
	case e.Test == "": // package level: result lines and anything a TestMain prints
		if e.Action == "fail" || (e.Action == "output" && strings.HasPrefix(e.Output, "FAIL")) {
			s.failed = true
			s.flushUnfinished(e.Package)
		}
		if e.Action == "output" && e.Output != "PASS\n" && e.Output != "FAIL\n" {
			fmt.Fprint(s.out, e.Output)
		}
	case e.Action == "output":
		if _, ok := s.buf[key]; !ok {
			s.order = append(s.order, key)
		}
		s.buf[key] = append(s.buf[key], e.Output)
	case e.Action == "fail":
		s.failed = true
		fmt.Fprint(s.out, strings.Join(s.buf[key], ""))
		delete(s.buf, key)
	case e.Action == "skip":
		sk := skip{Package: strings.TrimPrefix(e.Package, s.module), Test: e.Test, Message: skipMessage(s.buf[key])}
		sk.Allowed = s.allowed(sk)
		s.skips = append(s.skips, sk)
		delete(s.buf, key)
	case e.Action == "pass":
		delete(s.buf, key)
	}
}

// logPrefix is the "file_test.go:123: " that t.Log and t.Skip put before a message.
var logPrefix = regexp.MustCompile(`^[\w.-]+\.go:\d+: `)

// flushUnfinished prints the output of pkg's tests that never reported pass, fail or skip: the test
// binary died under them (a timeout's panic, os.Exit, a crash), and their output says where.
func (s *summary) flushUnfinished(pkg string) {
	kept := s.order[:0]
	for _, key := range s.order {
		lines, open := s.buf[key]
		switch {
		case !open:
		case strings.HasPrefix(key, pkg+"\x00"):
			fmt.Fprint(s.out, strings.Join(lines, ""))
			delete(s.buf, key)
		default:
			kept = append(kept, key)
		}
	}
	s.order = kept
}

// skipMessage is a skipped test's own output without the framing lines (=== RUN, --- SKIP, …) and
// without the file:line prefixes, so that tests skipping for one reason group together.
func skipMessage(lines []string) string {
	var msg []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		msg = append(msg, logPrefix.ReplaceAllString(t, ""))
	}
	if len(msg) == 0 {
		return "(no message)"
	}
	return strings.Join(msg, " / ")
}

func (s *summary) allowed(sk skip) string {
	for _, r := range s.rules {
		if r.pkg == sk.Package && r.test.MatchString(sk.Test) {
			return r.reason
		}
	}
	return ""
}

// report prints the skipped tests grouped by package and message, and returns the skips that are
// not on the allow-list.
func (s *summary) report() []skip {
	var unexpected []skip
	if len(s.skips) == 0 {
		fmt.Fprintln(s.out, "\nno test skipped")
		return nil
	}
	type group struct {
		pkg, msg, allowed string
		tests             []string
	}
	var groups []*group
	for _, sk := range s.skips {
		if sk.Allowed == "" {
			unexpected = append(unexpected, sk)
		}
		i := slices.IndexFunc(groups, func(g *group) bool { return g.pkg == sk.Package && g.msg == sk.Message })
		if i < 0 {
			groups = append(groups, &group{pkg: sk.Package, msg: sk.Message, allowed: sk.Allowed})
			i = len(groups) - 1
		}
		groups[i].tests = append(groups[i].tests, sk.Test)
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return strings.Compare(a.pkg, b.pkg) })
	plural := "s"
	if len(s.skips) == 1 {
		plural = ""
	}
	fmt.Fprintf(s.out, "\n%d test%s skipped (%d not on the allow-list of optional skips):\n", len(s.skips), plural, len(unexpected))
	pkg := ""
	for _, g := range groups {
		if g.pkg != pkg {
			pkg = g.pkg
			fmt.Fprintf(s.out, "  %s\n", pkg)
		}
		tag := "UNEXPECTED"
		if g.allowed != "" {
			tag = "optional: " + g.allowed
		}
		fmt.Fprintf(s.out, "    %s\n      %s [%s]\n", g.msg, strings.Join(shorten(g.tests, 6), ", "), tag)
	}
	return unexpected
}

// shorten keeps the first n names and counts the rest.
func shorten(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(slices.Clone(names[:n]), fmt.Sprintf("… %d more", len(names)-n))
}
