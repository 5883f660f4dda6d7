package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// errUsage: the command line was wrong; the usage went to stderr (exit status 2).
var errUsage = errors.New("usage")

// errHelp: help was asked for (-h, --help) and printed to stdout (exit status 0).
var errHelp = errors.New("help")

// newFlagSet returns a flag set whose usage prints the command's synopsis and flags.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("kvrouter "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: kvrouter %s\n\nFlags (each also read from KVROUTER_<FLAG>):\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; flags not given on the command line are read from KVROUTER_<FLAG> (upper case,
// '-' → '_'). Command line beats environment beats defaults.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // the flag package would print errors and usage to stderr, help included
	err := fs.Parse(flagsFirst(fs, args))
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return errHelp
	}
	fs.SetOutput(os.Stderr) // later fs.Usage() calls report a wrong command line
	if err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		fs.Usage()
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := "KVROUTER_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("invalid %s=%q: %v", env, v, e)
			}
		}
	})
	return err
}

// flagsFirst moves positional arguments after the flags, so that `kvrouter replay FILE --store URL`
// works like `kvrouter replay --store URL FILE` (the flag package stops at the first positional).
func flagsFirst(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBoolFlag(f) && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	if len(pos) == 0 {
		return flags
	}
	return append(append(flags, "--"), pos...)
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
