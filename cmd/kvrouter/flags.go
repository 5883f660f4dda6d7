package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

var errUsage = errors.New("usage")

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
	if err := fs.Parse(flagsFirst(fs, args)); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return errUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
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
