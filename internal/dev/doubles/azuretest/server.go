// Package azuretest is a fake Azure Instance Metadata Service for tests:
// the Scheduled Events endpoint and the VM's name. It is written from
// Microsoft's documentation ("Azure Metadata Service: Scheduled Events for
// Linux VMs", "Azure Instance Metadata Service") and refuses what the real
// service is documented to refuse.
package azuretest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/doubles/loopback"
)

// Paths the fake serves.
const (
	PathScheduledEvents = "/metadata/scheduledevents"
	PathComputeName     = "/metadata/instance/compute/name"
)

// scheduledEventsVersions are the Scheduled Events API versions of the
// documentation's version table, newest first.
var scheduledEventsVersions = []string{"2020-07-01", "2019-08-01", "2019-04-01", "2019-01-01", "2017-11-01", "2017-08-01", "2017-03-01"}

// instanceVersions are some of the instance metadata API versions the
// documentation lists, newest first.
var instanceVersions = []string{"2025-04-07", "2024-07-17", "2024-03-15", "2023-11-15", "2023-07-01", "2021-12-13", "2021-11-15", "2021-11-01", "2021-10-01", "2021-08-01", "2021-05-01", "2021-03-01", "2021-02-01", "2021-01-01", "2020-12-01", "2020-10-01", "2020-09-01", "2020-07-15", "2020-06-01"}

// Event is a scheduled event as the service returns it.
type Event struct {
	EventID           string   `json:"EventId"`
	EventType         string   `json:"EventType"`
	ResourceType      string   `json:"ResourceType"`
	Resources         []string `json:"Resources"`
	EventStatus       string   `json:"EventStatus"`
	NotBefore         string   `json:"NotBefore"`
	Description       string   `json:"Description"`
	EventSource       string   `json:"EventSource"`
	DurationInSeconds int      `json:"DurationInSeconds"`
}

// document is the Scheduled Events document.
type document struct {
	DocumentIncarnation int     `json:"DocumentIncarnation"`
	Events              []Event `json:"Events"`
}

// Server is a fake metadata service on a loopback port. Its methods may be
// called from any goroutine.
type Server struct {
	http   *loopback.Server
	vmName string

	mu          sync.Mutex
	incarnation int
	events      []Event
	acks        []string
	served      int  // requests that passed the checks
	hold        bool // approved events stay Scheduled
	status      int  // when non-zero, the status every request gets
}

// NewServer starts a fake metadata service for the VM vmName, with no
// event; it stops when the test ends.
func NewServer(t testing.TB, vmName string) *Server {
	t.Helper()
	s := &Server{vmName: vmName, incarnation: 1}
	var err error
	if s.http, err = loopback.Listen("azuretest", s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// URL is the service's base URL, the agent's Endpoint.
func (s *Server) URL() string { return s.http.URL() }

// AddEvent adds an event, or replaces the one with its EventId, and moves
// DocumentIncarnation on. Empty ResourceType and EventStatus are
// "VirtualMachine" and "Scheduled".
func (s *Server) AddEvent(e Event) {
	if e.ResourceType == "" {
		e.ResourceType = "VirtualMachine"
	}
	if e.EventStatus == "" {
		e.EventStatus = "Scheduled"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.indexLocked(e.EventID); i >= 0 {
		s.events[i] = e
	} else {
		s.events = append(s.events, e)
	}
	s.incarnation++
}

// RemoveEvent removes an event, as the service does once it is over, and
// moves DocumentIncarnation on.
func (s *Server) RemoveEvent(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := s.indexLocked(id); i >= 0 {
		s.events = slices.Delete(s.events, i, i+1)
		s.incarnation++
	}
}

// Events are the current events.
func (s *Server) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.events)
}

// Incarnation is the current DocumentIncarnation.
func (s *Server) Incarnation() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.incarnation
}

// Acknowledgements are the EventIds of every accepted StartRequest, in
// order, repeats included.
func (s *Server) Acknowledgements() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.acks)
}

// Requests is how many requests passed the header and version checks.
func (s *Server) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// HoldApprovals keeps approved events Scheduled, as Azure does while it
// waits for the other VMs on the host to approve ("The event may not start
// immediately upon approval"); false lets the next approval start them.
func (s *Server) HoldApprovals(hold bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold = hold
}

// SetStatus makes every request answer status, such as 500 or 410 (which
// the documentation says to retry); 0 ends it.
func (s *Server) SetStatus(status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = status
}

// Stop closes the listener and every connection: requests are refused
// until Start. Stopping a stopped server does nothing.
func (s *Server) Stop() { s.http.Stop() }

// Start listens again on the same address after Stop. Starting a running
// server does nothing.
func (s *Server) Start() error { return s.http.Start() }

func (s *Server) indexLocked(id string) int {
	return slices.IndexFunc(s.events, func(e Event) bool { return e.EventID == id })
}

// ServeHTTP answers one request as the metadata service does.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// "Requests must contain the header Metadata: true and must not
	// contain an X-Forwarded-For header. Any request that doesn't meet both
	// of these requirements is rejected." The status for a proxied request
	// is not documented; this fake answers 400, like the missing header.
	if _, ok := r.Header["X-Forwarded-For"]; ok {
		writeError(w, http.StatusBadRequest, map[string]any{"error": "Bad request. The request was proxied (X-Forwarded-For)"})
		return
	}
	// "400 Bad Request, Required metadata header not specified".
	if !strings.EqualFold(r.Header.Get("Metadata"), "true") {
		writeError(w, http.StatusBadRequest, map[string]any{"error": "Bad request. Required metadata header not specified"})
		return
	}
	q := r.URL.Query()
	// "Requests with duplicate query parameter names will be rejected."
	for _, v := range q {
		if len(v) > 1 {
			writeError(w, http.StatusBadRequest, map[string]any{"error": "Bad request. Duplicate query parameter"})
			return
		}
	}
	var versions []string
	switch r.URL.Path {
	case PathScheduledEvents:
		versions = scheduledEventsVersions
	case PathComputeName:
		versions = instanceVersions
	default:
		writeError(w, http.StatusNotFound, map[string]any{"error": "Not found"})
		return
	}
	// Versions are mandatory: a missing or unknown one gets this error,
	// with the newest versions.
	if !slices.Contains(versions, q.Get("api-version")) {
		writeError(w, http.StatusBadRequest, map[string]any{
			"error":           "Bad request. api-version is invalid or was not specified in the request. For more information refer to aka.ms/azureimds",
			"newest-versions": versions[:3],
		})
		return
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	if s.status != 0 {
		writeError(w, s.status, map[string]any{"error": http.StatusText(s.status)})
		return
	}
	switch {
	case r.URL.Path == PathComputeName && r.Method == http.MethodGet:
		// A leaf node needs format=text: the default format, json, is
		// refused for it.
		if q.Get("format") != "text" {
			writeError(w, http.StatusBadRequest, map[string]any{"error": "Bad request. format=text is required for leaf nodes"})
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(s.vmName))
	case r.URL.Path == PathScheduledEvents && r.Method == http.MethodGet:
		doc := document{DocumentIncarnation: s.incarnation, Events: slices.Clone(s.events)}
		if doc.Events == nil {
			doc.Events = []Event{} // an empty array when nothing is scheduled
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		_ = json.NewEncoder(w).Encode(doc)
	case r.URL.Path == PathScheduledEvents && r.Method == http.MethodPost:
		s.startLocked(w, r)
	default:
		writeError(w, http.StatusMethodNotAllowed, map[string]any{"error": "Method not allowed"})
	}
}

// startLocked takes a POST of StartRequests. The service answers 200 for
// valid EventIds, even an event already approved, and 400 for a malformed
// request; this fake counts an EventId that is not current as malformed.
// An approved event proceeds: it turns Started, its NotBefore empty (unless
// approvals are held).
func (s *Server) startLocked(w http.ResponseWriter, r *http.Request) {
	var body struct {
		StartRequests []struct {
			EventID string `json:"EventId"`
		} `json:"StartRequests"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || len(body.StartRequests) == 0 {
		writeError(w, http.StatusBadRequest, map[string]any{"error": "Bad request. The body is not a list of StartRequests"})
		return
	}
	for _, sr := range body.StartRequests {
		if s.indexLocked(sr.EventID) < 0 {
			writeError(w, http.StatusBadRequest, map[string]any{"error": fmt.Sprintf("Bad request. No event %q", sr.EventID)})
			return
		}
	}
	changed := false
	for _, sr := range body.StartRequests {
		s.acks = append(s.acks, sr.EventID)
		e := &s.events[s.indexLocked(sr.EventID)]
		if e.EventStatus != "Started" && !s.hold {
			e.EventStatus, e.NotBefore = "Started", ""
			changed = true
		}
	}
	if changed {
		s.incarnation++
	}
	w.WriteHeader(http.StatusOK)
}

func writeError(w http.ResponseWriter, status int, body map[string]any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
