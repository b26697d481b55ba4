package testutil

import (
	"context"
	"net"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Eventually polls f every 200ms until it returns nil, and fails the test
// with f's last error, under what, if it does not within timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = f()
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, last)
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
