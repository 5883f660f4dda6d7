// Command library prints the Functions library kvrouter loads (luascripts.Library), for scripts/luaprof.sh.
package main

import (
	"fmt"
	"os"

	"github.com/kvrouter/kvrouter/luascripts"
)

func main() {
	lib, err := luascripts.Library()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Print(lib)
}
