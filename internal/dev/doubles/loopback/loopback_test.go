package loopback_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/doubles/loopback"
)

// TestStopRefusesAndStartServesAgainOnTheSameAddress: a stopped server
// refuses connections, and started again it answers on the same URL.
func TestStopRefusesAndStartServesAgainOnTheSameAddress(t *testing.T) {
	s, err := loopback.Listen("test", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "here") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	get := func() (string, error) {
		resp, err := http.Get(s.URL())
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if body, err := get(); err != nil || body != "here" || !s.Running() {
		t.Fatalf("a new server: %q, %v, running %v", body, err, s.Running())
	}
	s.Stop()
	s.Stop() // twice does nothing
	if _, err := get(); err == nil || s.Running() {
		t.Fatalf("a stopped server answered (running %v)", s.Running())
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil { // twice does nothing
		t.Fatal(err)
	}
	if body, err := get(); err != nil || body != "here" {
		t.Fatalf("started again: %q, %v", body, err)
	}
}
