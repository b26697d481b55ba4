// Package gcptest is a fake Compute Engine metadata server for tests. It is
// written from Google's documentation ("View and query VM metadata",
// "Query the metadata server for maintenance event notices", "Predefined
// metadata keys", "Troubleshoot metadata server access issues") and
// refuses what the real server is documented to refuse, so a client that
// passes against it speaks to the real one the same way.
package gcptest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/doubles/loopback"
)

// Keys the server holds from the start, with the values a VM that is not
// being preempted or maintained reads.
const (
	KeyPreempted        = "instance/preempted"
	KeyMaintenanceEvent = "instance/maintenance-event"
	// KeyMachineType is the VM's machine type, documented ("Predefined
	// metadata keys") as projects/PROJECT_NUM/machineTypes/MACHINE_TYPE;
	// the server starts with DefaultMachineType.
	KeyMachineType = "instance/machine-type"
)

// ProjectNumber is the numeric project ID in the server's machine type.
const ProjectNumber = "123456789012"

// DefaultMachineType is the machine type the server starts with: a
// general-purpose VM without GPUs.
const DefaultMachineType = "n2-standard-4"

// pathPrefix is where the v1 metadata lives.
const pathPrefix = "/computeMetadata/v1/"

// Server is a fake metadata server on a loopback port. Its methods may be
// called from any goroutine.
type Server struct {
	http *loopback.Server

	mu      sync.Mutex
	values  map[string]string
	changed chan struct{} // closed and replaced when anything changes
	status  int           // when non-zero, the status every request gets
	waiting int           // requests hanging in wait_for_change
	served  int           // requests that passed the header checks
}

// NewServer starts a fake metadata server with preempted "FALSE",
// maintenance-event "NONE" and machine type DefaultMachineType; it stops
// when the test ends.
func NewServer(t testing.TB) *Server {
	t.Helper()
	s, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Listen starts a fake metadata server on a free port of 127.0.0.1, as
// NewServer, outside a test (the demo); Stop stops it.
func Listen() (*Server, error) {
	s := &Server{
		values: map[string]string{
			KeyPreempted:        "FALSE",
			KeyMaintenanceEvent: "NONE",
			KeyMachineType:      MachineType(DefaultMachineType),
		},
		changed: make(chan struct{}),
	}
	var err error
	if s.http, err = loopback.Listen("gcptest", s); err != nil {
		return nil, err
	}
	return s, nil
}

// URL is the server's base URL, the agent's Endpoint.
func (s *Server) URL() string { return s.http.URL() }

// Set sets a key (such as KeyPreempted) to value, waking the requests that
// wait for it to change.
func (s *Server) Set(key, value string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[key] = value
	s.wakeLocked()
}

// SetPreempted sets instance/preempted: "TRUE" once Compute Engine
// preempts the VM, "FALSE" otherwise.
func (s *Server) SetPreempted(preempted bool) {
	v := "FALSE"
	if preempted {
		v = "TRUE"
	}
	s.Set(KeyPreempted, v)
}

// SetMaintenanceEvent sets instance/maintenance-event ("NONE",
// "MIGRATE_ON_HOST_MAINTENANCE", "TERMINATE_ON_HOST_MAINTENANCE").
func (s *Server) SetMaintenanceEvent(value string) { s.Set(KeyMaintenanceEvent, value) }

// MachineType is the value of instance/machine-type for a VM of machine
// type name ("a3-highgpu-8g").
func MachineType(name string) string { return "projects/" + ProjectNumber + "/machineTypes/" + name }

// SetMachineType sets instance/machine-type to the machine type name. On
// Compute Engine it changes only while the VM is stopped.
func (s *Server) SetMachineType(name string) { s.Set(KeyMachineType, MachineType(name)) }

// SetUnavailable makes every request, waiting ones included, answer
// 503 Service Unavailable, as the documentation says the server may while
// the VM is live migrated; false ends it.
func (s *Server) SetUnavailable(unavailable bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = 0
	if unavailable {
		s.status = http.StatusServiceUnavailable
	}
	s.wakeLocked()
}

// Waiting is how many requests hang in wait_for_change now.
func (s *Server) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waiting
}

// Requests is how many requests passed the header checks so far.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Stop closes the listener and every connection: requests are refused
// until Start, and the requests waiting for a change are answered. Stopping
// a stopped server does nothing.
func (s *Server) Stop() {
	s.http.Stop()
	s.mu.Lock()
	s.wakeLocked()
	s.mu.Unlock()
}

// Start listens again on the same address after Stop. Starting a running
// server does nothing.
func (s *Server) Start() error { return s.http.Start() }

func (s *Server) wakeLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// ETag is the entity tag the server gives value. Like the real server's it
// depends on the content only: the same value has the same ETag.
func ETag(value string) string {
	sum := sha256.Sum256([]byte(value))
	return hex.EncodeToString(sum[:8])
}

// ServeHTTP answers one request as the metadata server does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Every answer of the metadata server carries Metadata-Flavor: Google,
	// which is how a client tells it from something else on the address.
	w.Header().Set("Metadata-Flavor", "Google")
	w.Header().Set("Server", "Metadata Server for VM")

	// "Any request that contains the header X-Forwarded-For is
	// automatically rejected by the metadata server": it means the request
	// was proxied. The documentation gives no body for it.
	if _, ok := r.Header["X-Forwarded-For"]; ok {
		forbidden(w, r, "")
		return
	}
	// Without Metadata-Flavor: Google the server answers 403 with its
	// error page ending "Missing Metadata-Flavor:Google header.".
	if r.Header.Get("Metadata-Flavor") != "Google" {
		forbidden(w, r, " Missing Metadata-Flavor:Google header.")
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "Method not allowed", http.StatusMethodNotAllowed)
		return
	}
	key, ok := strings.CutPrefix(r.URL.Path, pathPrefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	q := r.URL.Query()
	wait := q.Get("wait_for_change") == "true"
	var timeout <-chan time.Time
	if v, ok := q["timeout_sec"]; ok {
		// "It is only possible to set an integer value for the timeout."
		sec, err := strconv.Atoi(v[0])
		if err != nil || sec <= 0 {
			http.Error(w, "Bad Request: timeout_sec must be a positive integer", http.StatusBadRequest)
			return
		}
		timer := time.NewTimer(time.Duration(sec) * time.Second)
		defer timer.Stop()
		timeout = timer.C
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	value, status, found := s.lookupLocked(key)
	if wait && status == 0 && found {
		// wait_for_change hangs until the value's ETag differs from
		// last_etag (from the current one when last_etag is absent), or
		// timeout_sec passes; either way the answer is the current value.
		// A last_etag that is not the current one returns at once.
		last := q.Get("last_etag")
		if last == "" {
			last = ETag(value)
		}
		s.waiting++
		for ETag(value) == last && status == 0 && found {
			changed := s.changed
			s.mu.Unlock()
			var done bool
			select {
			case <-changed:
			case <-timeout:
				done = true
			case <-r.Context().Done():
				done = true
			}
			s.mu.Lock()
			value, status, found = s.lookupLocked(key)
			if done {
				break
			}
		}
		s.waiting--
	}
	switch {
	case status != 0:
		http.Error(w, http.StatusText(status), status)
	case !found:
		http.NotFound(w, r)
	default:
		w.Header().Set("ETag", ETag(value))
		w.Header().Set("Content-Type", "application/text")
		_, _ = w.Write([]byte(value))
	}
}

// lookupLocked reads a key: its value, the status that overrides it (the
// server is unavailable or stopped), and whether it exists.
func (s *Server) lookupLocked(key string) (value string, status int, found bool) {
	if !s.http.Running() {
		status = http.StatusServiceUnavailable
	} else {
		status = s.status
	}
	value, found = s.values[key]
	return value, status, found
}

// forbidden writes the metadata server's 403 page, with why appended.
func forbidden(w http.ResponseWriter, r *http.Request, why string) {
	w.Header().Set("Content-Type", "text/html; charset=UTF-8")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, `<!DOCTYPE html>
<html lang=en>
  <meta charset=utf-8>
  <title>Error 403 (Forbidden)!!1</title>
  <p><b>403.</b> <ins>That’s an error.</ins>
  <p>Your client does not have permission to get URL <code>%s</code> from this server.%s <ins>That’s all we know.</ins>
`, html.EscapeString(r.URL.Path), why)
}
