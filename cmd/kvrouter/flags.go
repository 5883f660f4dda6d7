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
	if err := fs.Parse(args); err != nil {
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
