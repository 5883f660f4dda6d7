package traces

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"embed"
	"fmt"
	"io"
	"os"
	"strings"
)

// BundledPrefix starts the name of a trace embedded in the binary (see Open).
const BundledPrefix = "bundled:"

// MooncakeConversation names the bundled Mooncake conversation trace: the default trace of the demo,
// `simulate` and `bench index`, and the one the tests use.
const MooncakeConversation = BundledPrefix + "mooncake-conversation"

// BundledTrace describes a trace embedded in the binary (the data files and their licence are in
// data/, see data/README.md).
type BundledTrace struct {
	Name    string // "bundled:…", accepted by Open and the Load*File functions
	Title   string // what charts and reports call it
	Source  string // where the file comes from
	License string
	file    string // gzip file under data/
}

// Bundled lists the traces embedded in the binary.
var Bundled = []BundledTrace{{
	Name:    MooncakeConversation,
	Title:   "Mooncake conversation trace (Kimi chat, 1 h)",
	Source:  "kvcache-ai/Mooncake FAST25-release/traces/conversation_trace.jsonl",
	License: "Apache-2.0",
	file:    "data/mooncake_conversation_trace.jsonl.gz",
}}

//go:embed data/*.gz
var bundledFS embed.FS

// Title returns the human name of a trace: a bundled trace's Title, else the name unchanged.
func Title(name string) string {
	if b, ok := bundledTrace(name); ok {
		return b.Title
	}
	return name
}

func bundledTrace(name string) (BundledTrace, bool) {
	for _, b := range Bundled {
		if b.Name == name {
			return b, true
		}
	}
	return BundledTrace{}, false
}

// gzipMagic starts every gzip stream (RFC 1952, ID1 ID2).
var gzipMagic = []byte{0x1f, 0x8b}

// Open opens a trace for reading: "bundled:NAME" is a trace embedded in the binary (Bundled), any
// other name a file. Gzip-compressed content (a .jsonl.gz or .csv.gz file, every bundled trace) is
// recognised by its magic bytes and decompressed on the fly, whatever the name's extension. The
// caller closes the reader.
func Open(name string) (io.ReadCloser, error) {
	var src io.ReadCloser
	if strings.HasPrefix(name, BundledPrefix) {
		b, ok := bundledTrace(name)
		if !ok {
			names := make([]string, len(Bundled))
			for i, b := range Bundled {
				names[i] = b.Name
			}
			return nil, fmt.Errorf("unknown bundled trace %q (bundled: %s)", name, strings.Join(names, ", "))
		}
		f, err := bundledFS.Open(b.file)
		if err != nil {
			return nil, err
		}
		src = f
	} else {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		src = f
	}
	br := bufio.NewReaderSize(src, 64<<10)
	head, _ := br.Peek(len(gzipMagic)) // a shorter file is not gzip; its read error comes again later
	if !bytes.Equal(head, gzipMagic) {
		return readCloser{br, src}, nil
	}
	zr, err := gzip.NewReader(br)
	if err != nil {
		src.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return readCloser{zr, src}, nil
}

// readCloser reads through a (decompressing, buffering) reader and closes the source underneath.
type readCloser struct {
	io.Reader
	src io.Closer
}

func (r readCloser) Close() error { return r.src.Close() }
