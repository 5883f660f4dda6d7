#!/usr/bin/env bash
# test-setup.sh — makes sure the tools the test suite needs are installed (`make test` runs it first;
# .ci/run runs it with --lint). On Debian/Ubuntu, as root, it installs what is missing with apt-get;
# otherwise it stops and prints the exact command to run.
#
#   tool                         package          needed by
#   redis-server                 redis-server     internal/testredis: every Redis test, statestore, integration
#   redis-cli                    redis-tools      internal/testredis (Redis Cluster tests)
#   valkey-server (optional)     valkey-server    `make test-valkey` (run by `make test`): the Redis suites
#                                                 again on Valkey (SPEC §8). Installed after the others, on
#                                                 its own: Debian 12 has it in bookworm-backports, whose
#                                                 source this script adds; where no package exists the set-up
#                                                 still succeeds and test-valkey skips (under CI it fails)
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

# missing prints the packages whose tools are absent, one per line (valkey-server is handled apart).
missing() {
  has_redis_server || echo redis-server
  has_redis_cli || echo redis-tools
  has_jinja2 || echo python3-jinja2
  # The local Redis image wants a static busybox; a dynamic busybox package is left alone
  # (infra/redis-image/build.sh). Without Docker there is no image to build.
  if have docker && ! have busybox; then echo busybox-static; fi
  if ((lint)) && ! have luacheck; then echo lua-check; fi
  return 0
}

is_root() { [[ "$(id -u)" == "0" ]]; }

# valkey installs valkey-server on its own once the required packages are there: an archive without it
# (Ubuntu before 24.04, Debian 12 without backports reachable) must not fail the set-up for the rest.
# Debian 12's main archive has no Valkey; bookworm-backports has 8.0 (valkey-tools installs beside
# redis-tools, no conflict), so on bookworm that source is added when missing.
valkey() {
  if has_valkey; then say "valkey-server ok"; return 0; fi
  local hint="apt-get install -y --no-install-recommends valkey-server"
  if ! have apt-get || ! is_root; then
    say "optional: valkey-server is missing (make test-valkey skips; under CI it fails): $hint"
    say "  (Debian 12: first add 'deb http://deb.debian.org/debian bookworm-backports main' to apt's sources)"
    return 0
  fi
  local root=${KVROUTER_SETUP_SYSROOT:-}
  local bpo=$root/etc/apt/sources.list.d/kvrouter-bookworm-backports.list
  if [[ -r $root/etc/os-release && $(<"$root/etc/os-release") == *VERSION_CODENAME=bookworm* ]] && ! has_backports "$root"; then
    say "adding bookworm-backports for valkey-server ($bpo)"
    echo "deb http://deb.debian.org/debian bookworm-backports main" >"$bpo"
  fi
  # The package starts a system Valkey on 6379, where redis-server's package starts Redis (README's replay
  # example uses that one); the tests run their own servers on free ports, so Valkey's service is kept
  # from starting (a policy-rc.d refusing only it, removed again afterwards).
  local prc=$root/usr/sbin/policy-rc.d own_prc=0
  if [[ -d ${prc%/*} && ! -e $prc ]]; then
    printf '#!/bin/sh\ncase "$1" in valkey-server) exit 101 ;; esac\nexit 0\n' >"$prc" && own_prc=1
    chmod +x "$prc" 2>/dev/null || true
  fi
  say "installing valkey-server as root"
  local ok=0
  apt-get update -q && apt-get install -y -q --no-install-recommends valkey-server && ok=1
  if ((own_prc)); then rm -f "$prc" 2>/dev/null || : >"$prc"; fi
  hash -r
  if ((ok)) && has_valkey; then say "installed valkey-server"; else
    say "optional: valkey-server could not be installed here (see above): make test-valkey skips (under CI it fails)"
  fi
  return 0
}
has_backports() {
  local f
  for f in "$1/etc/apt/sources.list" "$1"/etc/apt/sources.list.d/*; do
    [[ -r $f && $(<"$f") == *bookworm-backports* ]] && return 0
  done
  return 1
}

mapfile -t need < <(missing)
if ((${#need[@]} == 0)); then
  say "ok (redis-server, redis-cli, python3-jinja2$(have docker && echo ", busybox")$( ((lint)) && echo ", luacheck"))"
  valkey
  exit 0
fi

install_cmd="apt-get update && apt-get install -y --no-install-recommends ${need[*]}"
say "missing packages: ${need[*]}"
if ! have apt-get; then
  say "no apt-get here: install the equivalents of ${need[*]} with your package manager, then run make test again"
  say "(or KVROUTER_TEST_SETUP=skip make test: the tests that need them skip and are listed at the end)"
  exit 1
fi
if ! is_root; then
  say "not root, so not installing; run this, then make test again:"
  if have sudo; then
    echo "    sudo sh -c '$install_cmd'"
  else
    echo "    su -c '$install_cmd'"
  fi
  valkey
  exit 1
fi

say "installing as root: $install_cmd"
export DEBIAN_FRONTEND=noninteractive
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
valkey
