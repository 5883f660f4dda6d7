package vllmwire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.msgpack from testdata/README.md")

// readmeFixtures parses testdata/README.md: every "## NAME.msgpack" section's fenced block is a dump
// whose lines hold bytes left of "|" (hex pairs or "quoted ASCII").
func readmeFixtures(t testing.TB) map[string][]byte {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]byte{}
	var (
		name    string
		inBlock bool
	)
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## ") && strings.HasSuffix(line, ".msgpack"):
			name = strings.TrimPrefix(line, "## ")
		case strings.HasPrefix(line, "```"):
			inBlock = !inBlock
		case inBlock && name != "":
			left, _, _ := strings.Cut(line, "|")
			for _, tok := range strings.Fields(left) {
				if strings.HasPrefix(tok, `"`) {
					if len(tok) < 2 || !strings.HasSuffix(tok, `"`) {
						t.Fatalf("README.md:%d: bad string token %q", ln, tok)
					}
					out[name] = append(out[name], tok[1:len(tok)-1]...)
					continue
				}
				b, err := hex.DecodeString(tok)
				if err != nil || len(b) != 1 {
					t.Fatalf("README.md:%d: bad byte token %q", ln, tok)
				}
				out[name] = append(out[name], b[0])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) == 0 {
		t.Fatal("no fixtures in README.md")
	}
	return out
}

func TestFixturesMatchREADME(t *testing.T) {
	want := readmeFixtures(t)
	for name, b := range want {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, b, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to write it)", err)
		}
		if !bytes.Equal(got, b) {
			t.Errorf("%s differs from its README dump:\n file %x\n dump %x", name, got, b)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "*.msgpack"))
	for _, f := range files {
		if _, ok := want[filepath.Base(f)]; !ok {
			t.Errorf("%s has no dump in README.md", f)
		}
	}
}

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
