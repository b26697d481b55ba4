package sidecar

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// scrape reads /metrics of h as Prometheus does: the sample lines.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: HTTP %d %q", resp.StatusCode, data)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := p.TextToMetricFamilies(strings.NewReader(string(data))); err != nil {
		t.Fatalf("GET /metrics: not Prometheus' text format: %v", err)
	}
	return string(data)
}

// TestMetricsCountCommandsAndNameNothing: the commands that ran are
// counted by step and result, with their time, and the protocol's
// requests by method and code; nothing served names the drain, its run,
// the node, a command or what it printed.
func TestMetricsCountCommandsAndNameNothing(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate:
  - command: ["{{dir}}/evacuate-secret-name"]
  status: {command: ["{{dir}}/status"]}
  cancel: [{command: ["{{dir}}/fail"]}]
`, map[string]string{
		"evacuate-secret-name": logLine + "\necho password=hunter2",
		"status":               statusFromFile,
		"fail":                 "echo undo failed: password=hunter2 >&2; exit 3",
	}).start()
	drain, run, node := "d-7f3a9c", "r-51be02", "node-private-17"
	if code, _, body := f.do("POST", drain, run, map[string]string{"node": node, "mode": Maintenance}); code/100 != 2 {
		t.Fatalf("POST: HTTP %d %q", code, body)
	}
	f.touch("done")
	f.waitState(drain, "Completed")
	f.do("DELETE", drain, run, nil)
	f.waitFor(drain, "cancel to have failed once", func(int, Answer) bool { return strings.Contains(f.log.String(), "exited 3") })
	f.do("PUT", drain, run, nil)

	got := scrape(t, f.s.MetricsHandler())
	for _, want := range []string{
		`vacate_sidecar_commands_total{result="Succeeded",step="evacuate"} 1`,
		`vacate_sidecar_commands_total{result="Failed",step="evacuate"} 0`,
		`vacate_sidecar_commands_total{result="TimedOut",step="status"} 0`,
		`vacate_sidecar_command_duration_seconds_count{step="evacuate"} 1`,
		`vacate_sidecar_requests_total{code="405",method="other"} 1`,
		`vacate_build_info{`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for _, re := range []string{`vacate_sidecar_commands_total{result="Succeeded",step="status"} `,
		`vacate_sidecar_commands_total{result="Failed",step="cancel"} `, `vacate_sidecar_requests_total{code="200",method="GET"} `,
		`vacate_sidecar_requests_total{code="202",method="POST"} `} {
		if !strings.Contains(got, re) || strings.Contains(got, re+"0\n") {
			t.Errorf("/metrics: %s... not counted", re)
		}
	}
	for _, secret := range []string{drain, run, node, "hunter2", "secret-name", f.dir} {
		if strings.Contains(got, secret) {
			t.Errorf("/metrics names %q:\n%s", secret, got)
		}
	}
}

// TestMetricsCannotStartADrain: the metrics listener serves GET /metrics
// and nothing else. Requests of the protocol sent to it (POST, DELETE,
// GET with a drain, at /metrics or at the protocol's path) start, cancel
// and record nothing; and the protocol's listener does not serve
// /metrics.
func TestMetricsCannotStartADrain(t *testing.T) {
	f := newFixture(t, `
maintenance:
  evacuate: [{command: ["{{dir}}/step"]}]
  cancel: [{command: ["{{dir}}/step"]}]
`, map[string]string{"step": logLine}).start()
	srv := httptest.NewServer(f.s.MetricsHandler())
	defer srv.Close()
	body := `{"drain":"d1","run":"r1","node":"n1","mode":"Maintenance"}`
	for _, tc := range []struct {
		method, path string
		code         int
	}{
		{"POST", "/metrics?drain=d1&run=r1", http.StatusMethodNotAllowed},
		{"DELETE", "/metrics?drain=d1", http.StatusMethodNotAllowed},
		{"PUT", "/metrics", http.StatusMethodNotAllowed},
		{"POST", "/evacuate?drain=d1&run=r1", http.StatusNotFound},
		{"GET", "/evacuate?drain=d1", http.StatusNotFound},
		{"DELETE", "/evacuate?drain=d1", http.StatusNotFound},
		{"GET", "/healthz", http.StatusNotFound},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("%s %s on the metrics listener: HTTP %d, want %d", tc.method, tc.path, resp.StatusCode, tc.code)
		}
	}
	resp, err := http.Get(f.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the protocol's listener: HTTP %d, want 404 (metrics have their own port)", resp.StatusCode)
	}
	// What the protocol knows: no drain, no state file, no command run.
	if code, _, _ := f.do("GET", "d1", "", nil); code != http.StatusNotFound {
		t.Errorf("the protocol knows drain d1 (HTTP %d): a request to the metrics started it", code)
	}
	if files, _ := os.ReadDir(f.state); len(files) != 0 {
		t.Errorf("state files %v after requests to the metrics listener", files)
	}
	if _, err := os.Stat(filepath.Join(f.dir, "log")); !os.IsNotExist(err) {
		t.Errorf("a command ran (%s/log exists: %v)", f.dir, err)
	}
	if got := scrape(t, f.s.MetricsHandler()); strings.Contains(got, `step="evacuate"} 1`) {
		t.Errorf("a command was counted:\n%s", got)
	}
}

// TestMainServesMetricsApart: vacate-hook --metrics-listen serves /metrics
// on that address and not on the protocol's; the protocol's own port for
// the metrics is refused, naming the flag.
func TestMainServesMetricsApart(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	state := filepath.Join(dir, "state")
	if err := os.Mkdir(state, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("stateDir: "+state+"\nauth: {disabled: true}\nmaintenance: {evacuate: [{command: [true]}]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	listen, metricsAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	var out, errb syncBuffer
	if code := Main(context.Background(), []string{"--config", cfg, "--listen", listen, "--metrics-listen", listen}, &out, &errb); code != 2 ||
		!strings.Contains(errb.String(), "--metrics-listen") || !strings.Contains(errb.String(), "the protocol's port") {
		t.Errorf("metrics on the protocol's port: exit %d, %q; want 2 naming --metrics-listen", code, errb.String())
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, []string{"--config", cfg, "--listen", listen, "--metrics-listen", metricsAddr}, &out, &errb)
	}()
	testutil.Eventually(t, 10*time.Second, "vacate-hook to serve its metrics", func() error {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), `program="vacate-hook"`) {
			return fmt.Errorf("HTTP %d %.200q", resp.StatusCode, data)
		}
		return nil
	})
	resp, err := http.Get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /metrics on the protocol's port: HTTP %d, want 404", resp.StatusCode)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("vacate-hook stopped with exit %d: %s", code, errb.String())
	}
}
