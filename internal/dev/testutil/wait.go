package testutil

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Eventually calls f until it returns nil, and fails the test with f's last
// error, under what, if it has not within timeout. It calls f at once, then
// after 5ms, doubling the pause up to 100ms: a condition that holds soon is
// seen soon, and a long wait costs the API server ten reads a second.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	if err := poll(timeout, f); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

// ErrNotYet is the error of a condition checked by a predicate that says no
// more than no (see Holds).
var ErrNotYet = errors.New("not yet")

// Holds adapts a predicate to Eventually.
func Holds(cond func() bool) func() error {
	return func() error {
		if cond() {
			return nil
		}
		return ErrNotYet
	}
}

// Seen adapts a check that says what it saw to Eventually: the last state
// seen is the error when it never holds.
func Seen(cond func() (bool, string)) func() error {
	return func() error {
		ok, state := cond()
		if ok {
			return nil
		}
		return errors.New("last seen: " + state)
	}
}

func poll(timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	pause := 5 * time.Millisecond
	for {
		err := f()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Millisecond))
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// FreeAddr returns a loopback address with a port free at the time of the
// call, for a server the test starts.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
