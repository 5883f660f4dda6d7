package traces

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestOpenGzipAndPlainAgree: the same JSONL read plain, gzip-compressed under a .gz name and
// gzip-compressed under a plain name gives the same requests.
func TestOpenGzipAndPlainAgree(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}` + "\n" +
		`{"timestamp": 3000, "input_length": 512, "output_length": 1, "hash_ids": [0]}` + "\n"
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write([]byte(in)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := map[string][]byte{"t.jsonl": []byte(in), "t.jsonl.gz": gz.Bytes(), "gz-named-plain.jsonl": gz.Bytes()}
	var want []Request
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"t.jsonl", "t.jsonl.gz", "gz-named-plain.jsonl"} {
		reqs, err := LoadMooncakeFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if want == nil {
			want = reqs
		}
		if len(reqs) != 2 || !reflect.DeepEqual(reqs, want) {
			t.Fatalf("%s: %+v, want %+v", name, reqs, want)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	corrupt := filepath.Join(dir, "corrupt.jsonl.gz")
	if err := os.WriteFile(corrupt, []byte{0x1f, 0x8b, 8, 0, 0}, 0o644); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if reqs, err := LoadMooncakeFile(empty); err != nil || len(reqs) != 0 {
		t.Errorf("empty file: %v, %v", reqs, err)
	}
	for name, want := range map[string]string{
		"bundled:nosuch": `unknown bundled trace "bundled:nosuch" (bundled: bundled:mooncake-conversation)`,
		corrupt:          "corrupt.jsonl.gz: unexpected EOF",
		"/nonexistent/x": "no such file",
	} {
		r, err := Open(name)
		if err == nil {
			_, err = io.ReadAll(r)
			r.Close()
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Open(%q): err %v, want it to contain %q", name, err, want)
		}
	}
}

// TestBundledTitles: every bundled trace opens, is gzip-compressed (the embed pattern), and has a
// title, a source and a licence for charts and reports.
func TestBundledTitles(t *testing.T) {
	for _, b := range Bundled {
		if !strings.HasPrefix(b.Name, BundledPrefix) || b.Title == "" || b.Source == "" || b.License == "" {
			t.Errorf("%+v: incomplete", b)
		}
		if Title(b.Name) != b.Title {
			t.Errorf("Title(%q) = %q", b.Name, Title(b.Name))
		}
		raw, err := bundledFS.ReadFile(b.file)
		if err != nil || !bytes.HasPrefix(raw, gzipMagic) {
			t.Errorf("%s: %s not a gzip file (%v)", b.Name, b.file, err)
		}
	}
	if Title("/some/file.jsonl") != "/some/file.jsonl" {
		t.Error("Title changed a file name")
	}
}
