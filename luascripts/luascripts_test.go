package luascripts

import (
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestLayoutMatchesLib(t *testing.T) {
	if got := LibLayout(); got != strconv.Itoa(Layout) {
		t.Fatalf("lib.lua declares LAYOUT %q, luascripts.Layout is %d", got, Layout)
	}
}

func TestLibraryRegistersEveryScript(t *testing.T) {
	src, err := Library()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src, "#!lua name="+LibraryName()+"\n") {
		t.Fatalf("library does not start with its shebang: %.40q", src)
	}
	for _, s := range All {
		if !strings.Contains(src, "function_name = '"+s.Function()+"'") {
			t.Errorf("%s not registered", s.Name)
		}
		if _, err := Source(s.Name); err != nil {
			t.Error(err)
		}
	}
}

// TestKeySuffixesMatchLib: KeySuffixes (Go's KEYS order) is lib.lua's KEYS list, position by position.
func TestKeySuffixesMatchLib(t *testing.T) {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^--\s+(\d+) (\S+)\s+(HASH|STRING|LIST|ZSET|prefix)`)
	var got []string
	for _, m := range re.FindAllStringSubmatch(string(lib), -1) {
		if n, _ := strconv.Atoi(m[1]); n != len(got)+1 {
			t.Fatalf("lib.lua KEYS header: position %s after %d entries", m[1], len(got))
		}
		got = append(got, m[2])
	}
	if !reflect.DeepEqual(got, KeySuffixes) {
		t.Fatalf("lib.lua KEYS %v\nKeySuffixes   %v", got, KeySuffixes)
	}
}

// TestScriptKeys: an operation's declared keys are KeySuffixes names in KeySuffixes order (the wrapper
// spreads them by position), and its wrapper carries the spread.
func TestScriptKeys(t *testing.T) {
	lib, err := Library()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range All {
		if s.Keys == nil {
			continue
		}
		pos := s.KeyPositions()
		if len(pos) != len(s.Keys) {
			t.Fatalf("%s: keys %v: only %d are pool keys", s.Name, s.Keys, len(pos))
		}
		for i := 1; i < len(pos); i++ {
			if pos[i] <= pos[i-1] {
				t.Fatalf("%s: keys %v not in KeySuffixes order", s.Name, s.Keys)
			}
		}
		if !strings.Contains(lib, "local function op_"+s.Name+"(KEYS, ARGV)\n"+s.keysPrologue()) {
			t.Fatalf("%s: the library's wrapper does not spread its keys", s.Name)
		}
	}
}
