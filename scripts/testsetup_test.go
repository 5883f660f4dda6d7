// Package scripts_test runs scripts/test-setup.sh against a PATH that holds only stub tools, so that
// "redis-server missing, as root" and "as a user" are checked on any machine (the script's only
// side effect, apt-get, is a stub that records its arguments).
package scripts_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubs writes executable /bin/sh scripts into a fresh directory (the test's whole PATH).
func stubs(t *testing.T, scripts map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runSetup runs the script with PATH=dir and a clean environment; it returns the exit code and
// the combined output.
func runSetup(t *testing.T, dir string, env []string, args ...string) (int, string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, append([]string{"test-setup.sh"}, args...)...)
	// KVROUTER_PYTHON=python3: the stub python3 on PATH stands for the interpreter the parity test runs.
	// KVROUTER_SETUP_SYSROOT: the system files the script reads and writes as root are under dir/sysroot.
	cmd.Env = append([]string{"PATH=" + dir, "HOME=" + t.TempDir(), "KVROUTER_PYTHON=python3",
		"KVROUTER_SETUP_SYSROOT=" + filepath.Join(dir, "sysroot")}, env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}

const (
	ok       = "exit 0"
	asRoot   = "echo 0"
	asUser   = "echo 1000"
	noJinja2 = "exit 1" // python3 present, `import jinja2` fails
)

// fakeApt records its arguments in $dir/apt.log; "install" creates the commands of the packages.
const fakeApt = `d=${0%/*}
echo "$@" >> "$d/apt.log"
[ "$1" = install ] || exit 0
for p in "$@"; do
  case "$p" in
  redis-server) printf '#!/bin/sh\nexit 0\n' > "$d/redis-server"; /bin/chmod +x "$d/redis-server" ;;
  redis-tools) printf '#!/bin/sh\nexit 0\n' > "$d/redis-cli"; /bin/chmod +x "$d/redis-cli" ;;
  valkey-server) printf '#!/bin/sh\nexit 0\n' > "$d/valkey-server"; /bin/chmod +x "$d/valkey-server" ;;
  python3-jinja2) printf '#!/bin/sh\nexit 0\n' > "$d/python3"; /bin/chmod +x "$d/python3" ;;
  busybox-static) printf '#!/bin/sh\nexit 0\n' > "$d/busybox"; /bin/chmod +x "$d/busybox" ;;
  lua-check) printf '#!/bin/sh\nexit 0\n' > "$d/luacheck"; /bin/chmod +x "$d/luacheck" ;;
  esac
done`

func TestSetupAllPresent(t *testing.T) {
	dir := stubs(t, map[string]string{"redis-server": ok, "redis-cli": ok, "valkey-server": ok, "python3": ok, "id": asUser})
	code, out := runSetup(t, dir, nil)
	if code != 0 || !strings.Contains(out, "test-setup: ok (redis-server, redis-cli, python3-jinja2)\ntest-setup: valkey-server ok\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestSetupUserGetsCommand: without redis-server and redis-cli, as a user, the script stops and
// prints the command to run (with sudo when there is one).
func TestSetupUserGetsCommand(t *testing.T) {
	for _, sudo := range []bool{true, false} {
		s := map[string]string{"python3": noJinja2, "id": asUser, "apt-get": fakeApt}
		want := "    su -c 'apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools python3-jinja2'\n"
		if sudo {
			s["sudo"] = ok
			want = "    sudo sh -c 'apt-get update && apt-get install -y --no-install-recommends redis-server redis-tools python3-jinja2'\n"
		}
		dir := stubs(t, s)
		code, out := runSetup(t, dir, nil)
		if code != 1 || !strings.Contains(out, "not root, so not installing; run this, then make test again:\n"+want) ||
			!strings.Contains(out, "test-setup: optional: valkey-server is missing (make test-valkey skips; under CI it fails): apt-get install -y --no-install-recommends valkey-server\n") {
			t.Fatalf("sudo %v: exit %d:\n%s", sudo, code, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "apt.log")); err == nil {
			t.Fatalf("sudo %v: apt-get ran as a user", sudo)
		}
	}
}

// TestSetupRootInstalls: as root, the script installs what is missing (busybox-static too when
// Docker is there, lua-check with --lint) and checks the tools afterwards.
func TestSetupRootInstalls(t *testing.T) {
	dir := stubs(t, map[string]string{"id": asRoot, "apt-get": fakeApt, "docker": ok})
	code, out := runSetup(t, dir, nil, "--lint")
	if code != 0 || !strings.Contains(out, "test-setup: installed redis-server redis-tools python3-jinja2 busybox-static lua-check\ntest-setup: installing valkey-server as root\ntest-setup: installed valkey-server\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	log, err := os.ReadFile(filepath.Join(dir, "apt.log"))
	if err != nil {
		t.Fatal(err)
	}
	want := "update -q\ninstall -y -q --no-install-recommends redis-server redis-tools python3-jinja2 busybox-static lua-check\n" +
		"update -q\ninstall -y -q --no-install-recommends valkey-server\n"
	if string(log) != want {
		t.Fatalf("apt-get calls:\n%s\nwant:\n%s", log, want)
	}
	// A second run finds everything.
	if code, out := runSetup(t, dir, nil, "--lint"); code != 0 || !strings.Contains(out, "test-setup: ok") {
		t.Fatalf("second run: exit %d:\n%s", code, out)
	}
}

// TestSetupValkeyBackports: on Debian 12 (bookworm), whose main archive has no valkey-server, the script
// adds bookworm-backports before installing it and keeps only Valkey's service from starting during the
// install (policy-rc.d, removed afterwards); a system that already lists backports, or another release,
// gets no new source.
func TestSetupValkeyBackports(t *testing.T) {
	for _, c := range []struct {
		name, osRelease, sources string
		wantList                 bool
	}{
		{"bookworm", "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nVERSION_CODENAME=bookworm\n", "", true},
		{"bookworm with backports", "VERSION_CODENAME=bookworm\n", "deb http://deb.debian.org/debian bookworm-backports main\n", false},
		{"trixie", "VERSION_CODENAME=trixie\n", "", false},
	} {
		// apt-get also records whether policy-rc.d refuses valkey-server and lets redis-server start.
		apt := fakeApt + `
[ "$1" = install ] && { sh "$KVROUTER_SETUP_SYSROOT/usr/sbin/policy-rc.d" valkey-server start; echo "valkey $?"
  sh "$KVROUTER_SETUP_SYSROOT/usr/sbin/policy-rc.d" redis-server start; echo "redis $?"; } >> "$d/apt.log"
exit 0`
		dir := stubs(t, map[string]string{"id": asRoot, "apt-get": apt, "redis-server": ok, "redis-cli": ok, "python3": ok,
			"sh": "exec /bin/sh \"$@\"", "chmod": "exec /bin/chmod \"$@\"", "rm": "exec /bin/rm \"$@\""})
		root := filepath.Join(dir, "sysroot")
		for _, d := range []string{"etc/apt/sources.list.d", "usr/sbin"} {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(root, "etc/os-release"), []byte(c.osRelease), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte(c.sources), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out := runSetup(t, dir, nil)
		if code != 0 || !strings.Contains(out, "test-setup: ok (redis-server, redis-cli, python3-jinja2)\n") ||
			!strings.Contains(out, "test-setup: installing valkey-server as root\n") || !strings.Contains(out, "test-setup: installed valkey-server\n") ||
			c.wantList != strings.Contains(out, "test-setup: adding bookworm-backports for valkey-server") {
			t.Fatalf("%s: exit %d:\n%s", c.name, code, out)
		}
		list, err := os.ReadFile(filepath.Join(root, "etc/apt/sources.list.d/kvrouter-bookworm-backports.list"))
		if c.wantList != (err == nil) || c.wantList && string(list) != "deb http://deb.debian.org/debian bookworm-backports main\n" {
			t.Fatalf("%s: backports list %q (%v), want written: %v", c.name, list, err, c.wantList)
		}
		log, err := os.ReadFile(filepath.Join(dir, "apt.log"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(log), "valkey 101\nredis 0\n") {
			t.Fatalf("%s: policy-rc.d during the install:\n%s", c.name, log)
		}
		if _, err := os.Stat(filepath.Join(root, "usr/sbin/policy-rc.d")); err == nil {
			t.Fatalf("%s: policy-rc.d left behind", c.name)
		}
	}
}

// TestSetupValkeyUnavailable: an archive without valkey-server does not fail the set-up (the required
// packages are there); the script says test-valkey will skip.
func TestSetupValkeyUnavailable(t *testing.T) {
	apt := `echo "$@" >> "${0%/*}/apt.log"; [ "$1" = install ] && { echo "E: Unable to locate package valkey-server" >&2; exit 100; }; exit 0`
	dir := stubs(t, map[string]string{"id": asRoot, "apt-get": apt, "redis-server": ok, "redis-cli": ok, "python3": ok})
	code, out := runSetup(t, dir, nil)
	if code != 0 || !strings.Contains(out, "E: Unable to locate package valkey-server") ||
		!strings.Contains(out, "test-setup: optional: valkey-server could not be installed here (see above): make test-valkey skips (under CI it fails)") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSetupRootAptFails(t *testing.T) {
	dir := stubs(t, map[string]string{"id": asRoot, "apt-get": "echo 'E: network unreachable' >&2; exit 100",
		"redis-cli": ok, "valkey-server": ok, "python3": ok})
	code, out := runSetup(t, dir, nil)
	if code != 1 || !strings.Contains(out, "E: network unreachable") ||
		!strings.Contains(out, "test-setup: apt-get failed (see above); install redis-server by other means") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestSetupNoApt(t *testing.T) {
	dir := stubs(t, map[string]string{"id": asRoot, "redis-server": ok, "valkey-server": ok, "python3": ok})
	code, out := runSetup(t, dir, nil)
	if code != 1 || !strings.Contains(out, "no apt-get here: install the equivalents of redis-tools") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

// TestSetupOverrides: KVROUTER_REDIS_SERVER/CLI stand for the binaries (as in internal/testredis),
// and KVROUTER_TEST_SETUP=skip checks nothing.
func TestSetupOverrides(t *testing.T) {
	dir := stubs(t, map[string]string{"id": asUser, "python3": ok})
	code, out := runSetup(t, dir, []string{"KVROUTER_REDIS_SERVER=/x/redis-server", "KVROUTER_REDIS_CLI=/x/redis-cli",
		"KVROUTER_VALKEY_SERVER=/x/valkey-server"})
	if code != 0 || !strings.Contains(out, "test-setup: ok") {
		t.Fatalf("overrides: exit %d:\n%s", code, out)
	}
	code, out = runSetup(t, stubs(t, nil), []string{"KVROUTER_TEST_SETUP=skip"})
	if code != 0 || out != "test-setup: skipped (KVROUTER_TEST_SETUP=skip)\n" {
		t.Fatalf("skip: exit %d:\n%s", code, out)
	}
}
