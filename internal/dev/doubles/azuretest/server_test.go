package azuretest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/doubles/azuretest"
)

const events = "/metadata/scheduledevents?api-version=2020-07-01"

// do sends a request with the given headers and returns the status and the
// body.
func do(t *testing.T, s *azuretest.Server, method, path, body string, header map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.URL()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

var metadata = map[string]string{"Metadata": "true"}

func TestRejectsWhatIMDSRejects(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	for _, tc := range []struct {
		name   string
		method string
		path   string
		header map[string]string
		status int
		body   string
	}{
		{"no Metadata header", "GET", events, nil, 400, `"error":"Bad request. Required metadata header not specified"`},
		{"Metadata: false", "GET", events, map[string]string{"Metadata": "false"}, 400, "Required metadata header not specified"},
		{"proxied", "GET", events, map[string]string{"Metadata": "true", "X-Forwarded-For": "10.0.0.1"}, 400, ""},
		{"no api-version", "GET", "/metadata/scheduledevents", metadata, 400, "api-version is invalid or was not specified"},
		{"unsupported api-version", "GET", "/metadata/scheduledevents?api-version=2021-02-01", metadata, 400, `"newest-versions":["2020-07-01",`},
		{"duplicate api-version", "GET", events + "&api-version=2020-07-01", metadata, 400, ""},
		{"name as json", "GET", "/metadata/instance/compute/name?api-version=2021-02-01", metadata, 400, ""},
		{"PUT", "PUT", events, metadata, 405, ""},
		{"Metadata: True", "GET", events, map[string]string{"Metadata": "True"}, 200, `"DocumentIncarnation":1,"Events":[]`},
		{"name", "GET", "/metadata/instance/compute/name?api-version=2021-02-01&format=text", metadata, 200, "vm-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := do(t, s, tc.method, tc.path, "", tc.header)
			if status != tc.status || !strings.Contains(body, tc.body) {
				t.Errorf("got %d %s, want %d with %s", status, body, tc.status, tc.body)
			}
		})
	}
}

// document reads the events document.
func document(t *testing.T, s *azuretest.Server) (int, []azuretest.Event) {
	t.Helper()
	status, body := do(t, s, "GET", events, "", metadata)
	if status != 200 {
		t.Fatalf("GET: %d %s", status, body)
	}
	var doc struct {
		DocumentIncarnation int
		Events              []azuretest.Event
	}
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.DocumentIncarnation, doc.Events
}

func TestEventsAndAcknowledgements(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	inc0, _ := document(t, s)
	s.AddEvent(azuretest.Event{EventID: "e1", EventType: "Reboot", Resources: []string{"vm-1"}, NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT"})
	inc1, evs := document(t, s)
	if inc1 != inc0+1 || len(evs) != 1 || evs[0].EventStatus != "Scheduled" || evs[0].ResourceType != "VirtualMachine" {
		t.Fatalf("after AddEvent: incarnation %d (was %d), events %+v", inc1, inc0, evs)
	}

	status, _ := do(t, s, "POST", events, `{"StartRequests":[{"EventId":"nope"}]}`, metadata)
	if status != 400 {
		t.Errorf("acknowledging an unknown event: %d, want 400", status)
	}
	status, _ = do(t, s, "POST", events, `{"StartRequests":[{"EventId":"e1"}]}`, nil)
	if status != 400 {
		t.Errorf("acknowledging without Metadata: %d, want 400", status)
	}
	if acks := s.Acknowledgements(); len(acks) != 0 {
		t.Fatalf("rejected acknowledgements recorded: %v", acks)
	}

	status, _ = do(t, s, "POST", events, `{"StartRequests":[{"EventId":"e1"}]}`, metadata)
	if status != 200 {
		t.Fatalf("acknowledging e1: %d, want 200", status)
	}
	inc2, evs := document(t, s)
	if inc2 != inc1+1 || evs[0].EventStatus != "Started" || evs[0].NotBefore != "" {
		t.Errorf("after the acknowledgement: incarnation %d (was %d), event %+v; want it Started, NotBefore empty", inc2, inc1, evs[0])
	}
	// Approving it again is still 200, as for an event another VM approved.
	status, _ = do(t, s, "POST", events, `{"StartRequests":[{"EventId":"e1"}]}`, metadata)
	if inc3, _ := document(t, s); status != 200 || inc3 != inc2 {
		t.Errorf("acknowledging again: %d, incarnation %d (was %d); want 200, unchanged", status, inc3, inc2)
	}
	if acks := s.Acknowledgements(); !slices.Equal(acks, []string{"e1", "e1"}) {
		t.Errorf("Acknowledgements() = %v", acks)
	}

	s.HoldApprovals(true)
	s.AddEvent(azuretest.Event{EventID: "e2", EventType: "Freeze", Resources: []string{"vm-1"}, NotBefore: "Mon, 19 Sep 2016 18:29:47 GMT"})
	inc3, _ := document(t, s)
	status, _ = do(t, s, "POST", events, `{"StartRequests":[{"EventId":"e2"}]}`, metadata)
	if inc, evs := document(t, s); status != 200 || inc != inc3 || evs[1].EventStatus != "Scheduled" {
		t.Errorf("a held approval: %d, incarnation %d (was %d), event %+v; want 200, unchanged, Scheduled", status, inc, inc3, evs[1])
	}
	s.RemoveEvent("e2")
	inc2 = s.Incarnation()

	s.RemoveEvent("e1")
	if inc4, evs := document(t, s); inc4 != inc2+1 || len(evs) != 0 {
		t.Errorf("after RemoveEvent: incarnation %d, events %+v", inc4, evs)
	}
}

func TestStatusAndStop(t *testing.T) {
	s := azuretest.NewServer(t, "vm-1")
	s.SetStatus(http.StatusGone)
	if status, _ := do(t, s, "GET", events, "", metadata); status != http.StatusGone {
		t.Errorf("SetStatus(410): %d", status)
	}
	s.SetStatus(0)
	s.Stop()
	if _, err := http.Get(s.URL() + events); err == nil {
		t.Error("stopped: a request got through")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if status, _ := do(t, s, "GET", events, "", metadata); status != 200 {
		t.Errorf("started again: %d", status)
	}
}
