package main

import (
	"strings"
	"testing"
	"time"
)

const auditSample = `{"auditID":"a","stage":"ResponseComplete","verb":"create","user":{"username":"vacate:controller"},"objectRef":{"resource":"pods","subresource":"eviction","namespace":"bench","name":"web-0-x"},"responseStatus":{"code":201},"requestReceivedTimestamp":"2026-11-23T06:00:00.000100Z","stageTimestamp":"2026-11-23T06:00:00.004100Z"}
{"auditID":"w","stage":"ResponseStarted","verb":"watch","user":{"username":"vacate:controller"},"objectRef":{"resource":"pods"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-23T06:00:00.000050Z","stageTimestamp":"2026-11-23T06:00:00.000060Z"}
{"auditID":"b","stage":"ResponseComplete","verb":"create","user":{"username":"bench:kubectl"},"objectRef":{"resource":"pods","subresource":"eviction","namespace":"bench","name":"web-1-y"},"responseStatus":{"code":429},"requestReceivedTimestamp":"2026-11-23T06:00:01Z","stageTimestamp":"2026-11-23T06:00:01.001Z"}
{"auditID":"w","stage":"ResponseComplete","verb":"watch","user":{"username":"vacate:controller"},"objectRef":{"resource":"pods"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-23T06:00:00.000050Z","stageTimestamp":"2026-11-23T06:05:00Z"}
{"auditID":"c","stage":"ResponseComplete","verb":"get","user":{"username":"vacate:controller"},"objectRef":{"resource":"nodes","name":"node-0"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-11-23T06:00:02Z","stageTimestamp":"2026-11-23T06:00:02Z"}
`

func TestParseAudit(t *testing.T) {
	reqs, err := parseAudit(strings.NewReader(auditSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 4 {
		t.Fatalf("got %d requests, want 4 (the watch counted once): %+v", len(reqs), reqs)
	}
	if reqs[0].id != "w" || reqs[1].id != "a" {
		t.Errorf("not in order received: %s, %s", reqs[0].id, reqs[1].id)
	}
	a := reqs[1]
	if !a.eviction() || !a.accepted() || a.namespace != "bench" || a.name != "web-0-x" {
		t.Errorf("eviction parsed wrong: %+v", a)
	}
	if want := time.Date(2026, 11, 23, 6, 0, 0, 100_000, time.UTC); !a.received.Equal(want) {
		t.Errorf("received %v, want %v (microseconds kept)", a.received, want)
	}
	if a.done.Sub(a.received) != 4*time.Millisecond {
		t.Errorf("done - received = %v, want 4ms", a.done.Sub(a.received))
	}
	if reqs[2].accepted() {
		t.Error("a 429 counted as accepted")
	}
	from := time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)
	ctrl := byUser(reqs, "vacate:controller", from, from.Add(3*time.Second))
	if len(ctrl) != 3 {
		t.Errorf("controller requests: got %d, want 3", len(ctrl))
	}
	if got := byUser(reqs, "vacate:controller", from.Add(time.Second), from.Add(3*time.Second)); len(got) != 1 {
		t.Errorf("window: got %d requests, want 1", len(got))
	}
	n := countBy(ctrl)
	if n["create pods/eviction"] != 1 || n["watch pods"] != 1 || n["get nodes"] != 1 {
		t.Errorf("countBy: %v", n)
	}
}

func TestParseAuditBadLine(t *testing.T) {
	if _, err := parseAudit(strings.NewReader("{not json\n")); err == nil {
		t.Error("want an error for a line that is not JSON")
	}
}

func TestParseStatCPU(t *testing.T) {
	stat := "4242 (vacate controller) S 1 4242 4242 0 -1 4194560 9000 0 0 0 250 130 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3.8 {
		t.Errorf("cpu = %v, want 3.8 (380 ticks)", got)
	}
	if _, err := parseStatCPU("garbage"); err == nil {
		t.Error("want an error for a malformed line")
	}
}

func TestEventWrites(t *testing.T) {
	reqs := []request{
		{verb: "create", resource: "events"}, {verb: "patch", resource: "events"},
		{verb: "list", resource: "events"}, {verb: "create", resource: "pods", subresource: "eviction"},
	}
	if got := eventWrites(reqs); got != 2 {
		t.Errorf("eventWrites = %d, want 2 (a create and a patch; not the list nor the eviction)", got)
	}
	if got := share(1, 4); got != 25 {
		t.Errorf("share(1, 4) = %v, want 25", got)
	}
	if got := share(1, 0); got != 0 {
		t.Errorf("share(1, 0) = %v, want 0", got)
	}
}
