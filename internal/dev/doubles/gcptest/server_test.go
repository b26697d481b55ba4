package gcptest_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/doubles/gcptest"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// get sends a GET for path (with its query) with the given headers.
func get(t *testing.T, s *gcptest.Server, path string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

var flavor = map[string]string{"Metadata-Flavor": "Google"}

func TestRejectsRequestsWithoutFlavorOrProxied(t *testing.T) {
	s := gcptest.NewServer(t)
	const path = "/computeMetadata/v1/instance/preempted"

	resp, body := get(t, s, path, nil)
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("without Metadata-Flavor: status %d, want 403", resp.StatusCode)
	}
	if !strings.Contains(body, "<code>"+path+"</code> from this server. Missing Metadata-Flavor:Google header.") {
		t.Errorf("without Metadata-Flavor: body %q lacks the documented message", body)
	}

	resp, _ = get(t, s, path, map[string]string{"Metadata-Flavor": "google"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("with Metadata-Flavor: google: status %d, want 403", resp.StatusCode)
	}

	resp, _ = get(t, s, path, map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"})
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("with X-Forwarded-For: status %d, want 403", resp.StatusCode)
	}

	resp, body = get(t, s, path, flavor)
	if resp.StatusCode != http.StatusOK || body != "FALSE" {
		t.Errorf("with the header: %d %q, want 200 FALSE", resp.StatusCode, body)
	}
	if got := resp.Header.Get("Metadata-Flavor"); got != "Google" {
		t.Errorf("answer's Metadata-Flavor = %q, want Google", got)
	}
	if got := resp.Header.Get("ETag"); got != gcptest.ETag("FALSE") {
		t.Errorf("answer's ETag = %q, want %q", got, gcptest.ETag("FALSE"))
	}
}

func TestWaitForChange(t *testing.T) {
	s := gcptest.NewServer(t)
	const path = "/computeMetadata/v1/instance/preempted"
	falseTag := gcptest.ETag("FALSE")

	t.Run("a stale last_etag returns at once", func(t *testing.T) {
		start := time.Now()
		resp, body := get(t, s, path+"?wait_for_change=true&last_etag=0123456789abcdef&timeout_sec=30", flavor)
		if resp.StatusCode != http.StatusOK || body != "FALSE" || resp.Header.Get("ETag") != falseTag {
			t.Errorf("got %d %q ETag %q, want 200 FALSE %s", resp.StatusCode, body, resp.Header.Get("ETag"), falseTag)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("took %v: it waited", d)
		}
	})

	t.Run("timeout_sec ends the hang with the current value", func(t *testing.T) {
		start := time.Now()
		resp, body := get(t, s, path+"?wait_for_change=true&last_etag="+falseTag+"&timeout_sec=1", flavor)
		if d := time.Since(start); d < time.Second {
			t.Errorf("returned after %v, before timeout_sec", d)
		}
		if resp.StatusCode != http.StatusOK || body != "FALSE" || resp.Header.Get("ETag") != falseTag {
			t.Errorf("got %d %q ETag %q, want 200 FALSE %s", resp.StatusCode, body, resp.Header.Get("ETag"), falseTag)
		}
	})

	t.Run("a change ends the hang", func(t *testing.T) {
		type result struct {
			body, etag string
			err        error
		}
		done := make(chan result)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, s.URL()+path+"?wait_for_change=true&last_etag="+falseTag+"&timeout_sec=30", nil)
			req.Header.Set("Metadata-Flavor", "Google")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- result{err: err}
				return
			}
			defer func() { _ = resp.Body.Close() }()
			body, err := io.ReadAll(resp.Body)
			done <- result{string(body), resp.Header.Get("ETag"), err}
		}()
		testutil.Eventually(t, 5*time.Second, "the GET to hang", testutil.Holds(func() bool { return s.Waiting() == 1 }))
		s.SetMaintenanceEvent("MIGRATE_ON_HOST_MAINTENANCE") // another key: still waiting
		select {
		case r := <-done:
			t.Fatalf("returned %q on another key's change", r.body)
		case <-time.After(50 * time.Millisecond):
		}
		s.SetPreempted(true)
		select {
		case r := <-done:
			if r.err != nil || r.body != "TRUE" || r.etag != gcptest.ETag("TRUE") {
				t.Errorf("got %q ETag %q (%v), want TRUE %s", r.body, r.etag, r.err, gcptest.ETag("TRUE"))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the change did not end the hang")
		}
	})
}

func TestUnavailableAndStopped(t *testing.T) {
	s := gcptest.NewServer(t)
	const path = "/computeMetadata/v1/instance/maintenance-event"

	s.SetUnavailable(true)
	resp, _ := get(t, s, path, flavor)
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("unavailable: status %d, want 503", resp.StatusCode)
	}
	s.SetUnavailable(false)

	s.Stop()
	if _, err := http.Get(s.URL() + path); err == nil {
		t.Error("stopped: a request got through")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	resp, body := get(t, s, path, flavor)
	if resp.StatusCode != http.StatusOK || body != "NONE" {
		t.Errorf("started again: %d %q, want 200 NONE", resp.StatusCode, body)
	}
}
