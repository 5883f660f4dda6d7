# pools.sh — sourced by scripts/redis-floor.sh and scripts/floor-instr.sh: the floors' pools (keys named as
# long as `kvrouter bench route`'s since layout 6: its fresh prefix and pool name in the tag), their
# arguments, their set-up, and each floor's `kvrouter bench floor` flags, so both scripts drive the same
# decisions.
#
#   floor_setup PORT          # the bare and hot-prompt minimal pools (decision.lua loaded first)
#   floor_setup_big PORT      # minbig's pool (its prompts are filled by `bench floor --prompts`) and the
#                             # records mincmdbig's extra commands read
#   floor_flags FLOOR         # FLOOR_FLAGS=(--route-fn … --done-args …) for bare, min, minbig, mincmdbig,
#                             # nop, nopkeys (MIN_PROMPTS prompts for the big ones, default 6,250: 1 M entries)

# The bare decision's pool: 26 route keys and 13 done keys (kvrouter's key list, names as long as a pool's).
keys=() done_keys=()
tag="kvr:r01234567:{=w64-c64-k4-e1000000}"
for k in cfg ro wk seen lv fence sc orph nd dead ls lx ss sx e: g: s: wz hc hu sy lz lc sz lp tc; do keys+=("$tag:$k"); done
for k in lv ls sx lz cfg ro wk seen fence sc hc hu lc; do done_keys+=("$tag:$k"); done
prompt=$(head -c 256 /dev/urandom | od -An -tx1 | tr -d ' \n')   # 512 printable bytes: 64 blocks of 8
mtag="kvr:r01234567:{=m64-c64-k4-e1000000}"   # the minimal decision's pool: its own keys, as long as the bare one's
min_keys=("$mtag:e:" "$mtag:lv" "$mtag:lz" "$mtag:ls" "$mtag:lx") min_done_keys=("$mtag:lv" "$mtag:lz" "$mtag:ls" "$mtag:lx")
btag="kvr:r01234567:{=n64-c64-k4-e1000000}"   # minbig's pool
big_keys=("$btag:e:" "$btag:lv" "$btag:lz" "$btag:ls" "$btag:lx") big_done_keys=("$btag:lv" "$btag:lz" "$btag:ls" "$btag:lx")
cmd_keys=("${big_keys[@]}" "$btag:cfg" "$btag:sc" "$btag:lp" "$btag:dead" "$btag:sx" "$btag:sy" "$btag:orph" "$btag:nd" "$btag:hu")
cmd_done_keys=("${big_done_keys[@]}" "$btag:cfg" "$btag:sc" "$btag:lp")
lease=lease-0001 member=$(printf '%024d' 7)   # the lease route books and done ends; a load-order member
route_args=("$prompt" "$lease" "$(printf 'l%.0s' {1..60})" 1796220000000 "$member")
for _ in $(seq 14); do route_args+=(""); done
# The minimal decision's arguments: prompt, lease, now ms, 1,024 prompt tokens, block 16, weights 1 and 1.
min_args=("$prompt" "$lease" 1796220000000 1024 16 1 1) min_done_args=("$lease" 1 1 16)

join1f() { local IFS=$'\x1f'; echo "$*"; }

floor_setup() {
  redis-cli -p "$1" fcall kvrouter_floor_setup 26 "${keys[@]}" "$prompt" >/dev/null
  redis-cli -p "$1" fcall kvrouter_floor_min_setup 3 "${min_keys[@]:0:3}" "$prompt" >/dev/null
}
floor_setup_big() {
  redis-cli -p "$1" fcall kvrouter_floor_min_setup 3 "${big_keys[@]:0:3}" >/dev/null
  redis-cli -p "$1" hset "$btag:cfg" bin "$(head -c 232 /dev/zero | tr '\0' 'b')" layout 6 >/dev/null
  redis-cli -p "$1" hset "$btag:sc" rv 17962200000000001 egn 16384 lvs 1 >/dev/null
}
# floor_flags_of ROUTE_FN DONE_FN PROMPTS ROUTE_KEYS ROUTE_ARGS DONE_KEYS DONE_ARGS (lists joined by join1f)
floor_flags_of() {
  FLOOR_FLAGS=(--route-fn "$1" --done-fn "$2" --prompts "$3" --route-keys "$4" --route-args "$5" --done-keys "$6" --done-args "$7")
}
floor_flags() {
  local big=${MIN_PROMPTS:-6250}
  case "$1" in
    bare) floor_flags_of kvrouter_floor_route kvrouter_floor_done 0 "$(join1f "${keys[@]}")" "$(join1f "${route_args[@]}")" \
      "$(join1f "${done_keys[@]}")" "$(join1f "$lease" "$member")" ;;
    min) floor_flags_of kvrouter_floor_min_route kvrouter_floor_min_done 0 "$(join1f "${min_keys[@]}")" "$(join1f "${min_args[@]}")" \
      "$(join1f "${min_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    minbig) floor_flags_of kvrouter_floor_min_route kvrouter_floor_min_done "$big" "$(join1f "${big_keys[@]}")" \
      "$(join1f "${min_args[@]}")" "$(join1f "${big_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    mincmdbig) floor_flags_of kvrouter_floor_mincmd_route kvrouter_floor_mincmd_done "$big" "$(join1f "${cmd_keys[@]}")" \
      "$(join1f "${min_args[@]}")" "$(join1f "${cmd_done_keys[@]}")" "$(join1f "${min_done_args[@]}")" ;;
    nop) floor_flags_of kvrouter_floor_nop kvrouter_floor_nop 0 "" "" "" "" ;;
    nopkeys) floor_flags_of kvrouter_floor_nop kvrouter_floor_nop 0 "$(join1f "${keys[@]}")" "" "$(join1f "${done_keys[@]}")" "" ;;
    *) echo "unknown floor $1 (bare, min, minbig, mincmdbig, nop, nopkeys)" >&2; return 2 ;;
  esac
}
