#!/usr/bin/env bash
# test-setup.sh — makes sure the tools the test suite needs are installed (`make test` runs it first;
# .ci/run runs it with --lint). On Debian/Ubuntu, as root, it installs what is missing with apt-get;
# otherwise it stops and prints the exact command to run.
#
#   tool                         package          needed by
#   redis-server                 redis-server     internal/testredis: every Redis test, statestore, integration
#   redis-cli                    redis-tools      internal/testredis (Redis Cluster tests)
#   valkey-server                valkey-server    `make test-valkey` (run by `make test` under CI): the Redis
#                                                 suites again on Valkey (SPEC §8); Debian 12 has it in
#                                                 bookworm-backports, whose source this script adds when needed
#   python3 with jinja2          python3-jinja2   the gateway's chat-template tests (reference renderer)
#   busybox (only with Docker)   busybox-static   infra/redis-image (the local Redis image's /bin/sh)
#   luacheck (only with --lint)  lua-check        linting luascripts/*.lua
#
# Usage: scripts/test-setup.sh [--lint]
# Env:   KVROUTER_TEST_SETUP=skip   check nothing, install nothing (tests whose tools are missing then
#                                   skip, and `make test` lists them at the end; under CI they fail)
#        KVROUTER_REDIS_SERVER, KVROUTER_REDIS_CLI   binaries to use instead of PATH's (see testredis)
#        KVROUTER_VALKEY_SERVER   the valkey-server `make test-valkey` runs (default PATH's)
#        KVROUTER_PYTHON   the python3 whose jinja2 the parity test uses (default /usr/bin/python3)
#        KVROUTER_SETUP_SYSROOT   prefix of the system files read and written (/etc/os-release, apt's
#                                 sources, /usr/sbin/policy-rc.d); scripts/testsetup_test.go sets it
# Exit:  0 all present (or installed now); 1 something is missing and was not installed.
set -euo pipefail

lint=0
for a in "$@"; do
  case "$a" in
  --lint) lint=1 ;;
  *) echo "usage: $0 [--lint]" >&2; exit 2 ;;
  esac
done

say() { echo "test-setup: $*"; }

if [[ "${KVROUTER_TEST_SETUP:-}" == "skip" ]]; then
  say "skipped (KVROUTER_TEST_SETUP=skip)"
  exit 0
fi

have() { command -v "$1" >/dev/null 2>&1; }
has_redis_server() { [[ -n "${KVROUTER_REDIS_SERVER:-}" ]] || have redis-server; }
has_redis_cli() { [[ -n "${KVROUTER_REDIS_CLI:-}" ]] || have redis-cli; }
has_valkey() { [[ -n "${KVROUTER_VALKEY_SERVER:-}" ]] || have valkey-server; }
# The chat-template parity test runs $KVROUTER_PYTHON, by default Debian's /usr/bin/python3 (not whatever
# python3 comes first on PATH, e.g. a pyenv shim with its own jinja2), so that is the interpreter checked.
jinja2_python() {
  if [[ -n "${KVROUTER_PYTHON:-}" ]]; then echo "$KVROUTER_PYTHON"
  elif [[ -x /usr/bin/python3 ]]; then echo /usr/bin/python3
  else command -v python3; fi
}
has_jinja2() { local py; py=$(jinja2_python) && [[ -n "$py" ]] && "$py" -c 'import jinja2' >/dev/null 2>&1; }

# missing prints the packages whose tools are absent, one per line.
missing() {
  has_redis_server || echo redis-server
  has_redis_cli || echo redis-tools
  has_valkey || echo valkey-server
  has_jinja2 || echo python3-jinja2
  # The local Redis image wants a static busybox; a dynamic busybox package is left alone
  # (infra/redis-image/build.sh). Without Docker there is no image to build.
  if have docker && ! have busybox; then echo busybox-static; fi
  if ((lint)) && ! have luacheck; then echo lua-check; fi
  return 0
}

mapfile -t need < <(missing)
if ((${#need[@]} == 0)); then
  say "ok (redis-server, redis-cli, valkey-server, python3-jinja2$(have docker && echo ", busybox")$( ((lint)) && echo ", luacheck"))"
  exit 0
fi

install_cmd="apt-get update && apt-get install -y --no-install-recommends ${need[*]}"
say "missing packages: ${need[*]}"
if ! have apt-get; then
  say "no apt-get here: install the equivalents of ${need[*]} with your package manager, then run make test again"
  say "(or KVROUTER_TEST_SETUP=skip make test: the tests that need them skip and are listed at the end)"
  exit 1
fi
if [[ "$(id -u)" != "0" ]]; then
  say "not root, so not installing; run this, then make test again:"
  if have sudo; then
    echo "    sudo sh -c '$install_cmd'"
  else
    echo "    su -c '$install_cmd'"
  fi
  exit 1
fi

say "installing as root: $install_cmd"
export DEBIAN_FRONTEND=noninteractive
# Valkey is not in Debian 12's main archive; bookworm-backports has it (8.0, with valkey-tools beside
# redis-tools, no conflict). On bookworm the backports source is added when it is missing; elsewhere the
# distribution's own package is used (Debian 13, Ubuntu 24.04+).
root=${KVROUTER_SETUP_SYSROOT:-}
bpo=$root/etc/apt/sources.list.d/kvrouter-bookworm-backports.list
is_bookworm() { [[ -r $root/etc/os-release ]] && [[ $(<"$root/etc/os-release") == *VERSION_CODENAME=bookworm* ]]; }
has_backports() {
  local f
  for f in "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*; do
    [[ -r $f && $(<"$f") == *bookworm-backports* ]] && return 0
  done
  return 1
}
if [[ " ${need[*]} " == *" valkey-server "* ]] && is_bookworm && ! has_backports; then
  say "adding bookworm-backports for valkey-server ($bpo)"
  echo "deb http://deb.debian.org/debian bookworm-backports main" >"$bpo"
fi
# valkey-server's package starts a system Valkey on 6379, where redis-server's starts Redis (README's
# replay example uses that one); the tests run their own servers on free ports, so Valkey's service is
# kept from starting (a policy-rc.d refusing only it, removed again afterwards).
prc=$root/usr/sbin/policy-rc.d
own_prc=0
if [[ " ${need[*]} " == *" valkey-server "* && -d ${prc%/*} && ! -e $prc ]]; then
  printf '#!/bin/sh\ncase "$1" in valkey-server) exit 101 ;; esac\nexit 0\n' >"$prc" && own_prc=1
  chmod +x "$prc" 2>/dev/null || true
fi
trap 'if ((own_prc)); then rm -f "$prc" 2>/dev/null || : >"$prc"; fi' EXIT
if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "${need[@]}"; }; then
  say "apt-get failed (see above); install ${need[*]} by other means, then run make test again"
  exit 1
fi
hash -r
mapfile -t still < <(missing)
if ((${#still[@]})); then
  say "still missing after apt-get: ${still[*]}"
  if [[ " ${still[*]} " == *" python3-jinja2 "* ]]; then
    say "($(jinja2_python || echo python3) does not see jinja2; the parity test runs /usr/bin/python3)"
  fi
  exit 1
fi
say "installed ${need[*]}"
