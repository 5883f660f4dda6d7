package main

import (
	"slices"
	"testing"
)

func TestFlagsAfterPositionals(t *testing.T) {
	fs := newFlagSet("x", "x")
	store := fs.String("store", "memory", "")
	verbose := fs.Bool("v", false, "")
	if err := parseFlags(fs, []string{"FILE", "--store", "redis://h:1", "-v", "-"}); err != nil {
		t.Fatal(err)
	}
	if *store != "redis://h:1" || !*verbose || !slices.Equal(fs.Args(), []string{"FILE", "-"}) {
		t.Fatalf("store %q verbose %v args %v", *store, *verbose, fs.Args())
	}
}
