package main

import (
	"strings"
	"testing"
)

// stream is `go test -json` output (trimmed of times) for a package with a passing, a skipped, an
// allowed-skipped and a failing test with a skipped subtest, plus a package that failed to build.
const stream = `{"ImportPath":"m/b [m/b.test]","Action":"build-output","Output":"# m/b [m/b.test]\n"}
{"ImportPath":"m/b [m/b.test]","Action":"build-output","Output":"b/b.go:2:23: cannot use \"s\" as int value\n"}
{"ImportPath":"m/b [m/b.test]","Action":"build-fail"}
{"Action":"start","Package":"m/a"}
{"Action":"output","Package":"m/b","Output":"FAIL\tm/b [build failed]\n"}
{"Action":"fail","Package":"m/b","Elapsed":0,"FailedBuild":"m/b [m/b.test]"}
{"Action":"run","Package":"m/a","Test":"TestP"}
{"Action":"output","Package":"m/a","Test":"TestP","Output":"=== RUN   TestP\n"}
{"Action":"output","Package":"m/a","Test":"TestP","Output":"    a_test.go:3: quiet when passing\n"}
{"Action":"output","Package":"m/a","Test":"TestP","Output":"--- PASS: TestP (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestP","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestS","Output":"=== RUN   TestS\n"}
{"Action":"output","Package":"m/a","Test":"TestS","Output":"    a_test.go:4: redis-server not found\n"}
{"Action":"output","Package":"m/a","Test":"TestS","Output":"--- SKIP: TestS (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestS","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestS2","Output":"    b_test.go:17: redis-server not found\n"}
{"Action":"skip","Package":"m/a","Test":"TestS2","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestHarness","Output":"    a_test.go:9: ADDR not set\n"}
{"Action":"skip","Package":"m/a","Test":"TestHarness","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestF","Output":"=== RUN   TestF\n"}
{"Action":"output","Package":"m/a","Test":"TestF/sub","Output":"--- SKIP: TestF/sub (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestF/sub","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestF","Output":"    a_test.go:5: boom\n"}
{"Action":"output","Package":"m/a","Test":"TestF","Output":"--- FAIL: TestF (0.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestF","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"FAIL\n"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t0.014s\n"}
{"Action":"fail","Package":"m/a","Elapsed":0.016}
{"Action":"output","Package":"m/c","Test":"TestHang","Output":"=== RUN   TestHang\n"}
{"Action":"output","Package":"m/c","Test":"TestHang","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c\t1.005s\n"}
{"Action":"fail","Package":"m/c","Elapsed":1.005}
not json: echoed
`

func TestSummary(t *testing.T) {
	rules, err := parseAllowList("# comment\n\na TestHar.* manual harness, needs ADDR\na Test other\n")
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	s := newSummary(&out, "m/", rules)
	if err := s.consume(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	unexpected := s.report()
	got := out.String()
	if !s.failed {
		t.Error("failed test and build not noticed")
	}
	if len(unexpected) != 3 || unexpected[0].Test != "TestS" || unexpected[2].Test != "TestF/sub" {
		t.Errorf("unexpected skips %+v, want TestS, TestS2, TestF/sub", unexpected)
	}
	for _, want := range []string{
		"b/b.go:2:23: cannot use", // build errors
		"FAIL\tm/b [build failed]\n",
		"    a_test.go:5: boom\n--- FAIL: TestF", // a failed test's output
		"FAIL\tm/a\t0.014s\n",
		"not json: echoed\n",
		"=== RUN   TestHang\npanic: test timed out after 1s\nFAIL\tm/c\t1.005s\n", // a test that never ended
		"4 tests skipped (3 not on the allow-list of optional skips):\n  a\n",
		"    redis-server not found\n      TestS, TestS2 [UNEXPECTED]\n", // grouped by message, file:line dropped
		"    ADDR not set\n      TestHarness [optional: manual harness, needs ADDR]\n",
		"    (no message)\n      TestF/sub [UNEXPECTED]\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet when passing", "=== RUN   TestP", "\nFAIL\n"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("output has %q:\n%s", unwanted, got)
		}
	}
}

func TestParseAllowListErrors(t *testing.T) {
	for _, in := range []string{"pkg TestX", "pkg Test( reason"} {
		if _, err := parseAllowList(in); err == nil {
			t.Errorf("%q accepted", in)
		}
	}
	if _, err := parseAllowList(defaultAllowList); err != nil {
		t.Errorf("the embedded allow-list: %v", err)
	}
}
