package logind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/godbus/dbus/v5"
)

// logind's names on the bus (org.freedesktop.login1(5)).
const (
	busName      = "org.freedesktop.login1"
	managerPath  = dbus.ObjectPath("/org/freedesktop/login1")
	managerIface = "org.freedesktop.login1.Manager"

	signalPrepare             = managerIface + ".PrepareForShutdown"
	signalPrepareWithMetadata = managerIface + ".PrepareForShutdownWithMetadata"
	signalNameOwnerChanged    = "org.freedesktop.DBus.NameOwnerChanged"

	errOperationInProgress = "org.freedesktop.login1.OperationInProgress"
)

// inhibitWhy is the lock's reason, as `systemd-inhibit --list` shows it.
const inhibitWhy = "drain the node (vacate) before it shuts down or reboots"

// callTimeout bounds each D-Bus call, as D-Bus's default reply timeout does.
const callTimeout = 25 * time.Second

// notOnBus are the errors of a call to a service that is not on the bus,
// or does not answer.
var notOnBus = []string{
	"org.freedesktop.DBus.Error.ServiceUnknown",
	"org.freedesktop.DBus.Error.NameHasNoOwner",
	"org.freedesktop.DBus.Error.NoReply",
	"org.freedesktop.DBus.Error.Timeout",
	"org.freedesktop.DBus.Error.UnknownObject",
	"org.freedesktop.DBus.Error.UnknownMethod",
}

// manager is logind's Manager object on one connection.
type manager struct {
	conn *dbus.Conn
	obj  dbus.BusObject
}

// connect connects to the bus at address (empty: the system bus) and
// subscribes to logind's shutdown signals and to logind's coming and
// going; sigs receives them. The caller closes the connection: it is not
// closed when ctx ends, so that a lock logind sends is never lost in a
// cancelled call.
func connect(ctx context.Context, address string, sigs chan<- *dbus.Signal) (*manager, error) {
	// ctx ends the connection only while it is being set up.
	connCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	var conn *dbus.Conn
	var err error
	if address == "" {
		conn, err = dbus.ConnectSystemBus(dbus.WithContext(connCtx))
	} else {
		conn, err = dbus.Connect(address, dbus.WithContext(connCtx))
	}
	if err != nil {
		cancel()
		return nil, err
	}
	conn.Signal(sigs)
	matches := [][]dbus.MatchOption{
		{
			dbus.WithMatchSender("org.freedesktop.DBus"),
			dbus.WithMatchObjectPath("/org/freedesktop/DBus"),
			dbus.WithMatchInterface("org.freedesktop.DBus"),
			dbus.WithMatchMember("NameOwnerChanged"),
			dbus.WithMatchArg(0, busName),
		},
		logindSignal("PrepareForShutdown"),
		// systemd 255 and later; a match on a signal nobody sends is fine.
		logindSignal("PrepareForShutdownWithMetadata"),
	}
	for _, m := range matches {
		cctx, cancelCall := context.WithTimeout(ctx, callTimeout)
		err := conn.AddMatchSignalContext(cctx, m...)
		cancelCall()
		if err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("subscribing to signals: %w", err)
		}
	}
	return &manager{conn: conn, obj: conn.Object(busName, managerPath)}, nil
}

func logindSignal(member string) []dbus.MatchOption {
	return []dbus.MatchOption{
		dbus.WithMatchSender(busName),
		dbus.WithMatchObjectPath(managerPath),
		dbus.WithMatchInterface(managerIface),
		dbus.WithMatchMember(member),
	}
}

// inhibit takes a delay inhibitor lock on shutdown; closing the file
// releases it. The call is not cancelled with ctx: a reply that came after
// would leave the lock open and lost.
func (m *manager) inhibit(ctx context.Context) (*os.File, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), callTimeout)
	defer cancel()
	var fd dbus.UnixFD
	err := m.obj.CallWithContext(ctx, managerIface+".Inhibit", 0, "shutdown", "vacate", inhibitWhy, "delay").Store(&fd)
	if err != nil {
		return nil, fmt.Errorf("taking a delay inhibitor lock on shutdown (Inhibit): %w", err)
	}
	return os.NewFile(uintptr(fd), "logind-inhibitor"), nil
}

// owner is the unique name of logind's connection to the bus.
func (m *manager) owner(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var owner string
	if err := m.conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.GetNameOwner", 0, busName).Store(&owner); err != nil {
		return "", fmt.Errorf("looking for %s on the bus: %w", busName, err)
	}
	return owner, nil
}

// property reads one of the Manager's properties into v.
func (m *manager) property(ctx context.Context, name string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	var variant dbus.Variant
	if err := m.obj.CallWithContext(ctx, "org.freedesktop.DBus.Properties.Get", 0, managerIface, name).Store(&variant); err != nil {
		return fmt.Errorf("reading logind's property %s: %w", name, err)
	}
	if err := variant.Store(v); err != nil {
		return fmt.Errorf("reading logind's property %s: %w", name, err)
	}
	return nil
}

// inhibitDelayMax is InhibitDelayMaxUSec: how long logind waits for delay
// locks.
func (m *manager) inhibitDelayMax(ctx context.Context) (time.Duration, error) {
	var usec uint64
	if err := m.property(ctx, "InhibitDelayMaxUSec", &usec); err != nil {
		return 0, err
	}
	return time.Duration(usec) * time.Microsecond, nil
}

// preparingForShutdown is PreparingForShutdown: logind is waiting for
// delay locks before a shutdown.
func (m *manager) preparingForShutdown(ctx context.Context) (bool, error) {
	var b bool
	err := m.property(ctx, "PreparingForShutdown", &b)
	return b, err
}

// scheduledKind is the kind of ScheduledShutdown ("reboot", "poweroff",
// ...), empty when none is scheduled.
func (m *manager) scheduledKind(ctx context.Context) (string, error) {
	var s struct {
		Type string
		USec uint64
	}
	err := m.property(ctx, "ScheduledShutdown", &s)
	return s.Type, err
}

// errorName is the D-Bus error name of err, or "".
func errorName(err error) string {
	var de dbus.Error // godbus's calls fail with this value type
	if errors.As(err, &de) {
		return de.Name
	}
	return ""
}
