package luascripts

import (
	"strings"
	"testing"
	"time"

	"github.com/kvrouter/kvrouter/internal/testredis"
)

// TestEvalFormsCompile: every operation's plain EVAL form (Source: knobs_gen.lua + lib.lua + the
// operation, what `bench route --route-script`, the profilers and the fixtures run) compiles on a real
// server (SCRIPT LOAD compiles without running). The library form is loaded by every store test; the EVAL
// form was compiled only by the benchmark smoke test outside -short, so a change that broke it (Lua 5.1's
// 200 locals of a main chunk, a name lib.lua no longer defines at top level) went unseen in -short runs.
func TestEvalFormsCompile(t *testing.T) {
	srv := testredis.Start(t)
	for _, s := range All {
		src, err := Source(s.Name)
		if err != nil {
			t.Fatalf("%s: %v", s.Name, err)
		}
		sha, err := srv.Do(10*time.Second, "SCRIPT", "LOAD", src)
		if err != nil {
			t.Errorf("%s: SCRIPT LOAD: %v", s.Name, err)
			continue
		}
		if len(strings.TrimSpace(sha)) != 40 {
			t.Errorf("%s: SCRIPT LOAD answered %q, want a SHA-1", s.Name, sha)
		}
	}
}
