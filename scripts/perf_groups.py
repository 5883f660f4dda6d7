#!/usr/bin/env python3
"""perf_groups.py — group a `perf script` of redis-server (cpu-clock samples with call graphs) by where a
kvrouter operation's Redis time goes, for scripts/route-perf.sh.

    perf script -i perf.data | python3 scripts/perf_groups.py [--json]

A sample is charged to the first group (in GROUPS order) one of its frames belongs to, so the groups do not
overlap and sum to 100 %; "string interning" is charged before the calls that create the strings, and its
callers are listed apart. Time, not instructions: a cache miss costs what it costs (docs/PERFORMANCE.md
"Seventeenth session": callgrind's instruction counts had made a lone route's profile look flat).
"""
import collections
import json
import re
import sys

# (group, predicate on the sample's frames, leaf first). Order matters: the first match wins.
GROUPS = [
    ("kernel", lambda fr: fr[0].endswith("[k]")),
    ("string interning (luaS_newlstr)", lambda fr: "luaS_newlstr" in fr),
    ("Lua collector (luaC_step)", lambda fr: "luaC_step" in fr or "lua_gc" in fr),
    ("KEYS/ARGV tables (luaCreateArray)", lambda fr: "luaCreateArray" in fr),
    ("commands inside redis.call (scriptCall)", lambda fr: "scriptCall" in fr),
    ("redis.call's own work (luaRedisGenericCommand)", lambda fr: "luaRedisGenericCommand" in fr),
    ("Lua interpreter and library (lua_pcall)", lambda fr: "lua_pcall" in fr),
    ("FCALL set-up and reply (luaEngineCall)", lambda fr: "luaEngineCall" in fr or "fcallCommandGeneric" in fr),
    ("event loop, parsing, networking (user)", lambda fr: True),
]

# Callers of luaS_newlstr worth naming: the first of these found above it in the stack.
CREATORS = ["luaCreateArray", "luaV_concat", "str_sub", "parseReply", "luaL_pushresult", "mp_pack",
            "luaGetFromRegistry", "lua_tolstring", "luaV_tostring"]



def samples(lines):
    """Yields each sample's frames, leaf first, as symbol names ('[k]' appended to kernel ones)."""
    cur = None
    for line in lines:
        if line.strip() == "":
            if cur:
                yield cur
            cur = None
            continue
        if not line[0].isspace():  # a sample's header line: comm pid time: period event:
            if cur:
                yield cur
            cur = []
            continue
        if cur is None:
            continue
        parts = line.split(None, 2)
        if len(parts) < 2:
            continue
        sym = re.sub(r"\+0x[0-9a-f]+$", "", parts[1])
        dso = parts[2] if len(parts) > 2 else ""
        if "kernel.kallsyms" in dso or "[kernel" in dso:
            sym += " [k]"
        cur.append(sym)
    if cur:
        yield cur


def strip_k(s):
    return s[:-4] if s.endswith(" [k]") else s


def group(lines):
    """Returns {'samples': n, 'groups': [(name, share)], 'creators': [(caller, share)], 'top': [...]}."""
    counts = collections.Counter()
    creators = collections.Counter()
    leaves = collections.Counter()
    n = 0
    for fr in samples(lines):
        n += 1
        names = [strip_k(f) for f in fr]
        kernel_leaf = fr[0].endswith("[k]")
        view = [fr[0]] + names[1:] if kernel_leaf else names
        for name, pred in GROUPS:
            if pred(view):
                counts[name] += 1
                break
        leaves[fr[0]] += 1
        if "luaS_newlstr" in names and not kernel_leaf:
            who = next((c for c in names if c in CREATORS), "other")
            creators[who] += 1
    share = lambda c: round(100.0 * c / n, 2) if n else 0.0
    return {
        "samples": n,
        "groups": [(name, share(counts[name])) for name, _ in GROUPS],
        "string_creators": [(k, share(v)) for k, v in creators.most_common()],
        "top_leaves": [(k, share(v)) for k, v in leaves.most_common(15)],
    }


def main():
    out = group(sys.stdin)
    if "--json" in sys.argv[1:]:
        json.dump(out, sys.stdout)
        print()
        return
    print(f"{out['samples']} samples (share of the server's CPU time)")
    for name, s in out["groups"]:
        print(f"  {s:6.2f} %  {name}")
    print("string interning, by the code creating the strings:")
    for name, s in out["string_creators"]:
        print(f"  {s:6.2f} %  {name}")
    print("top leaf functions:")
    for name, s in out["top_leaves"]:
        print(f"  {s:6.2f} %  {name}")


if __name__ == "__main__":
    main()
