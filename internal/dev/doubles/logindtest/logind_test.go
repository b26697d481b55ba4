package logindtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/vacate-dev/vacate/internal/dev/doubles/logindtest"
)

// client connects to the bus as a logind client would.
func client(t *testing.T, address string) dbus.BusObject {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatalf("connecting to the test bus: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn.Object(logindtest.BusName, logindtest.Path)
}

func inhibit(obj dbus.BusObject, what, mode string) (*os.File, error) {
	var fd dbus.UnixFD
	err := obj.Call(logindtest.Interface+".Inhibit", 0, what, "test", "testing", mode).Store(&fd)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "lock"), nil
}

// TestInhibitChecksLikeLogind: the stand-in takes what logind takes and
// refuses, with InvalidArgs, what logind refuses.
func TestInhibitChecksLikeLogind(t *testing.T) {
	address := logindtest.StartBus(t)
	logindtest.Start(t, address)
	obj := client(t, address)

	for _, tc := range []struct {
		what, mode string
		ok         bool
	}{
		{"shutdown", "delay", true},
		{"sleep", "delay", true},
		{"shutdown:sleep", "delay", true},
		{"shutdown", "block", true},
		{"idle:handle-lid-switch:handle-power-key", "block", true},
		{"handle-suspend-key:handle-hibernate-key:handle-reboot-key", "block-weak", true},
		{"", "delay", false},
		{"reboot", "delay", false},
		{"shutdown:", "delay", false},
		{"shutdown::sleep", "delay", false},
		{"Shutdown", "delay", false},
		{"shutdown", "", false},
		{"shutdown", "weak", false},
		{"idle", "delay", false},
		{"shutdown:idle", "delay", false},
		{"handle-power-key", "delay", false},
	} {
		f, err := inhibit(obj, tc.what, tc.mode)
		if f != nil {
			f.Close()
		}
		if tc.ok && err != nil {
			t.Errorf("Inhibit(%q, %q): %v, want a lock", tc.what, tc.mode, err)
		}
		if !tc.ok {
			var de dbus.Error
			if err == nil {
				t.Errorf("Inhibit(%q, %q) gave a lock, want %s", tc.what, tc.mode, logindtest.ErrInvalidArgs)
			} else if de, _ = err.(dbus.Error); de.Name != logindtest.ErrInvalidArgs {
				t.Errorf("Inhibit(%q, %q): %v, want %s", tc.what, tc.mode, err, logindtest.ErrInvalidArgs)
			}
		}
	}
}

// TestLockReleasedOnClose: a lock counts as held while its holder keeps the
// fd open, and not once it closes it; a shutdown under way refuses new
// locks on shutdown, as logind does.
func TestLockReleasedOnClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	address := logindtest.StartBus(t)
	l := logindtest.Start(t, address)
	obj := client(t, address)

	f, err := inhibit(obj, "shutdown", "delay")
	if err != nil {
		t.Fatalf("Inhibit: %v", err)
	}
	idle, err := inhibit(obj, "idle", "block")
	if err != nil {
		t.Fatalf("Inhibit: %v", err)
	}
	defer idle.Close()
	if err := l.WaitHeld(ctx, 1); err != nil {
		t.Fatal(err)
	}
	got := l.Inhibitors()
	want := map[logindtest.Inhibitor]bool{
		{What: "shutdown", Who: "test", Why: "testing", Mode: "delay"}: true,
		{What: "idle", Who: "test", Why: "testing", Mode: "block"}:     true,
	}
	if len(got) != 2 || !want[got[0]] || !want[got[1]] || got[0] == got[1] {
		t.Errorf("inhibitors %+v, want a delay lock on shutdown and a block lock on idle", got)
	}

	l.EmitPrepareForShutdown(true, "reboot")
	_, err = inhibit(obj, "sleep:shutdown", "block")
	if de, _ := err.(dbus.Error); de.Name != logindtest.ErrOperationInProgress {
		t.Errorf("Inhibit during a shutdown: %v, want %s", err, logindtest.ErrOperationInProgress)
	}
	if l.Held() != 1 {
		t.Errorf("held %d delay locks on shutdown, want 1", l.Held())
	}

	f.Close()
	if err := l.WaitReleased(ctx); err != nil {
		t.Fatal(err)
	}
}
