package traces

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedTrace returns the path of a file under ../shared/traces beside the module root (the checkout),
// skipping the test when the shared trace folder is absent.
func sharedTrace(t testing.TB, name string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("module root (go.mod) not found above the test directory")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", "traces", name)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared trace %s absent (want the public traces in ../shared/traces beside the checkout): %v", p, err)
	}
	return p
}
