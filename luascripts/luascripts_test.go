package luascripts

import (
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
