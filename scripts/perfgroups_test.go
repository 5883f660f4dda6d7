package scripts_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// perfScript is `perf script` output of four redis-server samples (cpu-clock, DWARF call graphs, leaf
// first): a kernel one, a string created for KEYS, a collector step inside the interpreter, and the
// interpreter itself.
const perfScript = `redis-server 12494 10303.454474:     500000 cpu-clock: 
	ffffffff8103 pvm_irq_enable+0x12 ([kernel.kallsyms])
	ffffffff8104 finish_task_switch.isra.0+0x90 ([kernel.kallsyms])
	          62a2f epoll_wait+0x4f (/usr/lib/x86_64-linux-gnu/libc.so.6)
	           634bc aeMain+0x1c (/root/rsrc/jem/src/redis-server)

redis-server 12494 10303.455548:     500000 cpu-clock: 
	          14dd20 luaS_newlstr+0x60 (/root/rsrc/jem/src/redis-server)
	          145067 lua_pushlstring+0x27 (/root/rsrc/jem/src/redis-server)
	          134067 luaCreateArray+0x47 (/root/rsrc/jem/src/redis-server)
	          137686 luaEngineCall+0x86 (/root/rsrc/jem/src/redis-server)

redis-server 12494 10303.456548:     500000 cpu-clock: 
	          149000 sweeplist+0x30 (/root/rsrc/jem/src/redis-server)
	          149ac0 luaC_step+0x40 (/root/rsrc/jem/src/redis-server)
	          151430 luaV_execute+0xc50 (/root/rsrc/jem/src/redis-server)
	          145067 lua_pcall+0x47 (/root/rsrc/jem/src/redis-server)

redis-server 12494 10303.457548:     500000 cpu-clock: 
	          151430 luaV_execute+0xc50 (/root/rsrc/jem/src/redis-server)
	          145067 lua_pcall+0x47 (/root/rsrc/jem/src/redis-server)
	          137686 luaEngineCall+0x86 (/root/rsrc/jem/src/redis-server)
`

// python is the interpreter the scripts' tests run them with: $KVROUTER_PYTHON, default python3.
func python() string {
	if py := os.Getenv("KVROUTER_PYTHON"); py != "" {
		return py
	}
	return "python3"
}

// TestPerfGroups: scripts/perf_groups.py (scripts/route-perf.sh's grouping) charges each sample to one
// group, the first that matches, and names the code that created the interned strings.
func TestPerfGroups(t *testing.T) {
	cmd := exec.Command(python(), "perf_groups.py", "--json")
	cmd.Stdin = strings.NewReader(perfScript)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("perf_groups.py: %v", err)
	}
	var got struct {
		Samples  int              `json:"samples"`
		Groups   [][2]interface{} `json:"groups"`
		Creators [][2]interface{} `json:"string_creators"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	share := map[string]float64{}
	for _, g := range got.Groups {
		share[g[0].(string)] = g[1].(float64)
	}
	want := map[string]float64{"kernel": 25, "string interning (luaS_newlstr)": 25, "Lua collector (luaC_step)": 25,
		"Lua interpreter and library (lua_pcall)": 25, "KEYS/ARGV tables (luaCreateArray)": 0}
	if got.Samples != 4 {
		t.Fatalf("%d samples; want 4 (%s)", got.Samples, out)
	}
	for g, w := range want {
		if share[g] != w {
			t.Errorf("%s: %v %%; want %v (%s)", g, share[g], w, out)
		}
	}
	if len(got.Creators) != 1 || got.Creators[0][0] != "luaCreateArray" || got.Creators[0][1].(float64) != 25 {
		t.Errorf("string creators %v; want luaCreateArray 25 %%", got.Creators)
	}
}
