// Package logindtest runs what the logind source talks to in tests: a
// private D-Bus daemon (the real dbus-daemon, with a config of its own) and
// a stand-in systemd-logind on it, written from logind's documentation
// (org.freedesktop.login1(5)) and as strict as logind about inhibitor locks.
package logindtest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// busConfig is a private bus that anyone on the machine may use: the test
// process owns the stand-in's name and calls it.
const busConfig = `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=%s</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`

// startTimeout bounds how long dbus-daemon may take to listen.
const startTimeout = 10 * time.Second

// Bus is a private dbus-daemon. Stop and Start stop it (every connection
// is lost) and start it again at the same Address, as a restart of the
// system bus does.
type Bus struct {
	// Address is the bus's D-Bus address, for dbus.Connect.
	Address string

	t      testing.TB
	config string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartBus runs a private dbus-daemon for the test and returns its
// address; t.Cleanup stops it.
func StartBus(t testing.TB) string {
	t.Helper()
	return RunBus(t).Address
}

// RunBus runs a private dbus-daemon for the test; t.Cleanup stops it. It
// fails the test when dbus-daemon is not installed.
func RunBus(t testing.TB) *Bus {
	t.Helper()
	if _, err := exec.LookPath("dbus-daemon"); err != nil {
		t.Fatalf("dbus-daemon is not installed (%v): `make test` installs it (Debian package dbus-daemon), or run apt-get install dbus-daemon", err)
	}
	// A directory of its own, short: a unix socket's path has at most 107
	// bytes, and t.TempDir() carries the test's name.
	dir, err := os.MkdirTemp("", "vacate-dbus-")
	if err != nil {
		t.Fatalf("creating a directory for dbus-daemon: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	socket := filepath.Join(dir, "bus")
	config := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(config, fmt.Appendf(nil, busConfig, socket), 0o600); err != nil {
		t.Fatalf("writing dbus-daemon's config: %v", err)
	}
	b := &Bus{Address: "unix:path=" + socket, t: t, config: config}
	b.Start()
	t.Cleanup(b.Stop)
	return b
}

// Start starts the daemon again after Stop; it does nothing while the
// daemon runs.
func (b *Bus) Start() {
	b.t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		return
	}
	// dbus-daemon writes its address to fd 3 once it listens.
	r, w, err := os.Pipe()
	if err != nil {
		b.t.Fatalf("creating a pipe for dbus-daemon's address: %v", err)
	}
	defer r.Close()
	cmd := exec.Command("dbus-daemon", "--nofork", "--nopidfile", "--nosyslog", "--config-file="+b.config, "--print-address=3")
	cmd.ExtraFiles = []*os.File{w}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		w.Close()
		b.t.Fatalf("starting dbus-daemon: %v", err)
	}
	w.Close()
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) == "" {
			<-done
			b.t.Fatalf("dbus-daemon exited without listening: %s", stderr.String())
		}
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-done
		b.t.Fatalf("dbus-daemon did not listen within %s: %s", startTimeout, stderr.String())
	}
	b.cmd, b.done = cmd, done
}

// Stop stops the daemon, if it runs, and waits until it has exited.
func (b *Bus) Stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.done:
	case <-time.After(startTimeout):
		_ = b.cmd.Process.Kill()
		<-b.done
	}
	b.cmd, b.done = nil, nil
}
