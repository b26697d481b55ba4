package aws

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/agent"
	"github.com/vacate-dev/vacate/internal/devcluster"
)

// waitTimeout bounds every wait for the source or the mock.
const waitTimeout = 30 * time.Second

var mockBinary struct {
	once sync.Once
	path string
	err  error
}

// mockPath builds amazon-ec2-metadata-mock from source the first time (a
// minute or two) and returns the cached binary afterwards.
func mockPath(t *testing.T) string {
	t.Helper()
	mockBinary.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		mockBinary.path, mockBinary.err = devcluster.EnsureTool(ctx, devcluster.EC2MetadataMock, os.Stderr)
	})
	if mockBinary.err != nil {
		t.Fatalf("building %s: %v", devcluster.EC2MetadataMock, mockBinary.err)
	}
	return mockBinary.path
}

// metadataMock is a running amazon-ec2-metadata-mock that requires IMDSv2
// tokens, on a free port of 127.0.0.1.
type metadataMock struct {
	t    *testing.T
	args []string
	port string
	dir  string

	cmd  *exec.Cmd
	done chan struct{}
	logs *os.File
}

// startMock runs the mock with args (a command such as "spot" and its
// flags) until the test ends.
func startMock(t *testing.T, args ...string) *metadataMock {
	t.Helper()
	m := &metadataMock{t: t, args: args, port: freePort(t), dir: t.TempDir()}
	m.start()
	t.Cleanup(m.stop)
	return m
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// URL is the mock's endpoint.
func (m *metadataMock) URL() string { return "http://127.0.0.1:" + m.port }

// start starts the mock (again, after stop, on the same port) and waits
// until it hands out tokens.
func (m *metadataMock) start() {
	m.t.Helper()
	args := append(append([]string{}, m.args...), "--hostname", "127.0.0.1", "--port", m.port, "--imdsv2")
	m.cmd = exec.Command(mockPath(m.t), args...)
	m.cmd.Dir = m.dir
	// A HOME of its own, so no aemm-config.json of the user's applies.
	m.cmd.Env = append(os.Environ(), "HOME="+m.dir)
	logs, err := os.OpenFile(filepath.Join(m.dir, "mock.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	m.logs = logs
	m.cmd.Stdout, m.cmd.Stderr = logs, logs
	if err := m.cmd.Start(); err != nil {
		m.t.Fatalf("starting the metadata mock: %v", err)
	}
	m.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(m.cmd, m.done)

	deadline := time.Now().Add(waitTimeout)
	for {
		if _, err := mockToken(m.URL(), "60"); err == nil {
			return
		}
		select {
		case <-m.done:
			m.t.Fatalf("the metadata mock %v exited:\n%s", args, m.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the metadata mock %v does not answer after %s:\n%s", args, waitTimeout, m.logTail())
		}
	}
}

// stop kills the mock and waits until it has exited.
func (m *metadataMock) stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = m.logs.Close()
	m.cmd = nil
}

func (m *metadataMock) logTail() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "mock.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// mockToken gets an IMDSv2 token from endpoint.
func mockToken(endpoint, ttl string) (string, error) {
	req, err := http.NewRequest(http.MethodPut, endpoint+tokenPath, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set(tokenTTLHeader, ttl)
	status, body, err := send(req)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("token: status %d", status)
	}
	return body, nil
}

func send(req *http.Request) (int, string, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, "", err
	}
	return resp.StatusCode, strings.TrimSpace(string(b)), nil
}

// recorder is an agent.Reporter that keeps every report.
type recorder struct {
	mu       sync.Mutex
	notices  [][]agent.Notice
	problems [][]agent.Problem
}

func (r *recorder) Notices(n []agent.Notice) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notices = append(r.notices, append([]agent.Notice{}, n...))
}

func (r *recorder) Problems(p []agent.Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.problems = append(r.problems, append([]agent.Problem{}, p...))
}

// history returns copies of the reports so far.
func (r *recorder) history() ([][]agent.Notice, [][]agent.Problem) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]agent.Notice{}, r.notices...), append([][]agent.Problem{}, r.problems...)
}

// waitFor waits until cond holds for the reports so far.
func (r *recorder) waitFor(t *testing.T, what string, cond func(notices [][]agent.Notice, problems [][]agent.Problem) bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		n, p := r.history()
		if cond(n, p) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s, still waiting for %s;\nnotices reported: %s\nproblems reported: %+v", waitTimeout, what, describe(n), p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func describe(reports [][]agent.Notice) string {
	var b strings.Builder
	for _, ns := range reports {
		b.WriteString("\n  [")
		for _, n := range ns {
			fmt.Fprintf(&b, " %+v", n)
		}
		b.WriteString(" ]")
	}
	return b.String()
}

// countingTransport counts the source's requests, so a test can wait for
// more polls without sleeping a guessed time.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(req)
}

// waitRequests waits until the source has made n more requests.
func (c *countingTransport) waitRequests(t *testing.T, n int64) {
	t.Helper()
	target := c.n.Load() + n
	deadline := time.Now().Add(waitTimeout)
	for c.n.Load() < target {
		if time.Now().After(deadline) {
			t.Fatalf("the source made %d of %d more requests in %s", n-(target-c.n.Load()), n, waitTimeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runSource runs a Source with opts against endpoint until the test ends.
// Unless opts set them, it polls every 50ms with a counted client.
func runSource(t *testing.T, endpoint string, opts Options) (*recorder, *countingTransport) {
	t.Helper()
	ct := &countingTransport{}
	opts.Endpoint = endpoint
	if opts.Interval == 0 {
		opts.Interval = 50 * time.Millisecond
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Transport: ct, Timeout: 5 * time.Second}
	}
	src, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v when its context ended, want nil", err)
		}
	})
	return rec, ct
}
