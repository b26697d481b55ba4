package logindtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/godbus/dbus/v5/introspect"
	"github.com/godbus/dbus/v5/prop"
)

// logind's names on the bus.
const (
	BusName   = "org.freedesktop.login1"
	Path      = dbus.ObjectPath("/org/freedesktop/login1")
	Interface = "org.freedesktop.login1.Manager"
)

// Errors logind answers Inhibit with.
const (
	ErrInvalidArgs         = "org.freedesktop.DBus.Error.InvalidArgs"
	ErrOperationInProgress = "org.freedesktop.login1.OperationInProgress"
)

// DefaultInhibitDelayMax is logind's default InhibitDelayMaxSec=.
const DefaultInhibitDelayMax = 5 * time.Second

// inhibitWhats are the lock kinds logind knows, for Inhibit's what.
var inhibitWhats = []string{
	"shutdown", "sleep", "idle",
	"handle-power-key", "handle-suspend-key", "handle-hibernate-key",
	"handle-lid-switch", "handle-reboot-key",
}

// inhibitModes are the lock modes logind knows, for Inhibit's mode.
var inhibitModes = []string{"block", "delay", "block-weak"}

// Inhibitor is a lock taken with Inhibit and not released yet.
type Inhibitor struct {
	What, Who, Why, Mode string
}

// ScheduledShutdown is logind's property of that name: the kind of the
// shutdown and when, in microseconds since the epoch.
type ScheduledShutdown struct {
	Type string
	USec uint64
}

// Logind is a stand-in org.freedesktop.login1 on a bus. It implements
// Inhibit, the properties InhibitDelayMaxUSec, PreparingForShutdown and
// ScheduledShutdown, the signals PrepareForShutdown and
// PrepareForShutdownWithMetadata, introspection, and nothing else.
//
// Inhibit hands out the write end of a pipe and keeps the read end, as
// logind does with a FIFO: the lock is released when every copy of the
// write end is closed, which the stand-in sees as EOF on the read end.
type Logind struct {
	t     testing.TB
	conn  *dbus.Conn
	props *prop.Properties

	// owed are the Inhibit calls whose reply Inhibit sends itself, by
	// sender and serial (see intercept).
	owedMu sync.Mutex
	owed   map[callID]bool

	mu      sync.Mutex
	locks   map[*os.File]Inhibitor // by read end
	changed chan struct{}          // closed and replaced when locks change
	stopped bool
}

type callID struct {
	sender string
	serial uint32
}

// Config is what logind reads from logind.conf when it starts.
type Config struct {
	// InhibitDelayMax is InhibitDelayMaxSec= (default 5s, as in logind).
	InhibitDelayMax time.Duration
}

// Start connects a stand-in logind to the bus at address and takes the
// name org.freedesktop.login1, with logind's default configuration;
// t.Cleanup stops it.
func Start(t testing.TB, address string) *Logind {
	t.Helper()
	return StartConfig(t, address, Config{})
}

// StartConfig is Start with a configuration.
func StartConfig(t testing.TB, address string, c Config) *Logind {
	t.Helper()
	if c.InhibitDelayMax == 0 {
		c.InhibitDelayMax = DefaultInhibitDelayMax
	}
	l := &Logind{
		t:       t,
		owed:    map[callID]bool{},
		locks:   map[*os.File]Inhibitor{},
		changed: make(chan struct{}),
	}
	conn, err := dbus.Connect(address, dbus.WithIncomingInterceptor(l.intercept))
	if err != nil {
		t.Fatalf("connecting the stand-in logind to %s: %v", address, err)
	}
	l.conn = conn
	t.Cleanup(l.Stop)

	l.props, err = prop.Export(conn, Path, prop.Map{Interface: {
		"InhibitDelayMaxUSec":  {Value: uint64(c.InhibitDelayMax / time.Microsecond), Emit: prop.EmitConst},
		"PreparingForShutdown": {Value: false, Emit: prop.EmitFalse},
		"ScheduledShutdown":    {Value: ScheduledShutdown{}, Emit: prop.EmitFalse},
	}})
	if err != nil {
		t.Fatalf("exporting the stand-in logind's properties: %v", err)
	}
	if err := conn.ExportMethodTable(map[string]any{"Inhibit": l.inhibit}, Path, Interface); err != nil {
		t.Fatalf("exporting the stand-in logind's Inhibit: %v", err)
	}
	node := &introspect.Node{
		Name: string(Path),
		Interfaces: []introspect.Interface{
			introspect.IntrospectData,
			prop.IntrospectData,
			{
				Name: Interface,
				Methods: []introspect.Method{{Name: "Inhibit", Args: []introspect.Arg{
					{Name: "what", Type: "s", Direction: "in"},
					{Name: "who", Type: "s", Direction: "in"},
					{Name: "why", Type: "s", Direction: "in"},
					{Name: "mode", Type: "s", Direction: "in"},
					{Name: "fd", Type: "h", Direction: "out"},
				}}},
				Signals: []introspect.Signal{
					{Name: "PrepareForShutdown", Args: []introspect.Arg{{Name: "start", Type: "b"}}},
					{Name: "PrepareForShutdownWithMetadata", Args: []introspect.Arg{
						{Name: "start", Type: "b"}, {Name: "metadata", Type: "a{sv}"},
					}},
				},
				Properties: l.props.Introspection(Interface),
			},
		},
	}
	if err := conn.Export(introspect.NewIntrospectable(node), Path, "org.freedesktop.DBus.Introspectable"); err != nil {
		t.Fatalf("exporting the stand-in logind's introspection: %v", err)
	}
	reply, err := conn.RequestName(BusName, dbus.NameFlagDoNotQueue)
	if err != nil {
		t.Fatalf("taking the name %s on the bus: %v", BusName, err)
	}
	if reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("taking the name %s on the bus: another connection owns it (reply %d)", BusName, reply)
	}
	return l
}

// Stop takes the stand-in off the bus, as when logind exits: its name goes
// and it forgets its inhibitor locks (their holders' ends stay open).
// Stop is idempotent.
func (l *Logind) Stop() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.stopped = true
	for r := range l.locks {
		_ = r.Close() // its watch goroutine removes it
	}
	l.mu.Unlock()
	_ = l.conn.Close()
}

// SetInhibitDelayMax sets the property InhibitDelayMaxUSec, as a restart
// of logind with another InhibitDelayMaxSec= does.
func (l *Logind) SetInhibitDelayMax(d time.Duration) {
	l.props.SetMust(Interface, "InhibitDelayMaxUSec", uint64(d/time.Microsecond))
}

// SetScheduledShutdown sets the property ScheduledShutdown, as
// `shutdown --reboot +5` does (kind "reboot"); logind versions before 255
// tell a shutdown's kind only there.
func (l *Logind) SetScheduledShutdown(kind string, at time.Time) {
	var usec uint64
	if !at.IsZero() {
		usec = uint64(at.UnixMicro())
	}
	l.props.SetMust(Interface, "ScheduledShutdown", ScheduledShutdown{Type: kind, USec: usec})
}

// EmitPrepareForShutdown starts (active) or cancels a shutdown of the kind
// "reboot", "poweroff", "halt", "kexec" or "soft-reboot": it sets
// PreparingForShutdown and emits what logind emits. With a kind, that is
// PrepareForShutdownWithMetadata and then PrepareForShutdown, as systemd
// 255 and later do; without one, only PrepareForShutdown, as older
// versions do. While PreparingForShutdown is true, Inhibit refuses locks
// on shutdown, as logind does.
func (l *Logind) EmitPrepareForShutdown(active bool, kind string) {
	l.t.Helper()
	l.props.SetMust(Interface, "PreparingForShutdown", active)
	if kind != "" {
		metadata := map[string]dbus.Variant{"type": dbus.MakeVariant(kind)}
		if err := l.conn.Emit(Path, Interface+".PrepareForShutdownWithMetadata", active, metadata); err != nil {
			l.t.Fatalf("emitting PrepareForShutdownWithMetadata(%t, %s): %v", active, kind, err)
		}
	}
	if err := l.conn.Emit(Path, Interface+".PrepareForShutdown", active); err != nil {
		l.t.Fatalf("emitting PrepareForShutdown(%t): %v", active, err)
	}
}

// Inhibitors are the locks held now.
func (l *Logind) Inhibitors() []Inhibitor {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]Inhibitor, 0, len(l.locks))
	for _, in := range l.locks {
		out = append(out, in)
	}
	return out
}

// Held is how many delay locks on shutdown are held now.
func (l *Logind) Held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held()
}

func (l *Logind) held() int {
	n := 0
	for _, in := range l.locks {
		if in.Mode == "delay" && slices.Contains(strings.Split(in.What, ":"), "shutdown") {
			n++
		}
	}
	return n
}

// WaitHeld waits until n delay locks on shutdown are held.
func (l *Logind) WaitHeld(ctx context.Context, n int) error {
	for {
		l.mu.Lock()
		held, changed := l.held(), l.changed
		l.mu.Unlock()
		if held == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d delay locks on shutdown, %d are held: %w", n, held, ctx.Err())
		case <-changed:
		}
	}
}

// WaitReleased waits until no delay lock on shutdown is held.
func (l *Logind) WaitReleased(ctx context.Context) error {
	return l.WaitHeld(ctx, 0)
}

// intercept runs before godbus dispatches an incoming message. Inhibit's
// reply carries the write end of the lock's pipe, and the stand-in must
// close its own copy once the reply is sent, or the lock could never be
// released; godbus sends a method's reply after the method returns, so
// Inhibit sends its reply itself, and this stops godbus from sending a
// second one.
func (l *Logind) intercept(msg *dbus.Message) {
	if msg.Type != dbus.TypeMethodCall || msg.Flags&dbus.FlagNoReplyExpected != 0 {
		return
	}
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	iface, _ := msg.Headers[dbus.FieldInterface].Value().(string)
	member, _ := msg.Headers[dbus.FieldMember].Value().(string)
	if path != Path || iface != Interface || member != "Inhibit" {
		return
	}
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	l.owedMu.Lock()
	l.owed[callID{sender, msg.Serial()}] = true
	l.owedMu.Unlock()
	msg.Flags |= dbus.FlagNoReplyExpected
}

// inhibit is org.freedesktop.login1.Manager.Inhibit(what, who, why, mode)
// → (fd): it checks its arguments as logind does.
func (l *Logind) inhibit(msg dbus.Message, what, who, why, mode string) *dbus.Error {
	sender, _ := msg.Headers[dbus.FieldSender].Value().(string)
	id := callID{sender, msg.Serial()}
	l.owedMu.Lock()
	owed := l.owed[id]
	delete(l.owed, id)
	l.owedMu.Unlock()

	if err := l.check(what, mode); err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return dbus.MakeFailedError(fmt.Errorf("creating the lock's pipe: %w", err))
	}
	defer w.Close() // the caller's copy is the lock
	if !owed {
		// Nobody receives the lock: it goes at once, as in logind.
		r.Close()
		return nil
	}
	// The lock counts from before it is sent, so that a caller that has it
	// finds it counted.
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		r.Close()
		return dbus.MakeFailedError(errors.New("logind is stopping"))
	}
	l.locks[r] = Inhibitor{What: what, Who: who, Why: why, Mode: mode}
	l.changedLocked()
	l.mu.Unlock()
	go l.watch(r)

	reply := &dbus.Message{
		Type: dbus.TypeMethodReply,
		Headers: map[dbus.HeaderField]dbus.Variant{
			dbus.FieldReplySerial: dbus.MakeVariant(msg.Serial()),
			dbus.FieldDestination: dbus.MakeVariant(sender),
			dbus.FieldSignature:   dbus.MakeVariant(dbus.SignatureOf(dbus.UnixFD(0))),
		},
		Body: []any{dbus.UnixFD(w.Fd())},
	}
	// Send writes the reply, fd and all, before it returns; when it cannot,
	// the deferred Close releases the lock.
	l.conn.Send(reply, nil)
	return nil
}

// check is logind's check of Inhibit's what and mode.
func (l *Logind) check(what, mode string) *dbus.Error {
	kinds := strings.Split(what, ":")
	for _, k := range kinds {
		if !slices.Contains(inhibitWhats, k) {
			return dbus.NewError(ErrInvalidArgs, []any{"Invalid what specification " + what})
		}
	}
	if !slices.Contains(inhibitModes, mode) {
		return dbus.NewError(ErrInvalidArgs, []any{"Invalid mode specification " + mode})
	}
	if mode == "delay" && slices.ContainsFunc(kinds, func(k string) bool { return k != "shutdown" && k != "sleep" }) {
		return dbus.NewError(ErrInvalidArgs, []any{"Delay inhibitors only supported for shutdown and sleep"})
	}
	if preparing, _ := l.props.GetMust(Interface, "PreparingForShutdown").(bool); preparing && slices.Contains(kinds, "shutdown") {
		return dbus.NewError(ErrOperationInProgress, []any{"The operation inhibition has been requested for is already running"})
	}
	return nil
}

// watch waits until the lock's write ends are all closed (EOF), or the
// stand-in stops, and forgets the lock.
func (l *Logind) watch(r *os.File) {
	_, _ = io.Copy(io.Discard, r)
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = r.Close()
	delete(l.locks, r)
	l.changedLocked()
}

// changedLocked wakes the waiters; l.mu is held.
func (l *Logind) changedLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}
