// Package awstest runs the real amazon-ec2-metadata-mock for tests: built
// from source through the Go module proxy the first time
// (devcluster.EnsureTool), on a free port of 127.0.0.1, with IMDSv2
// required.
package awstest

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
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// waitTimeout bounds the wait for the mock to answer.
const waitTimeout = 30 * time.Second

var binary struct {
	once sync.Once
	path string
	err  error
}

// mockPath builds amazon-ec2-metadata-mock the first time (a minute or
// two) and returns the cached binary afterwards.
func mockPath(t testing.TB) string {
	t.Helper()
	binary.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		defer cancel()
		binary.path, binary.err = devcluster.EnsureTool(ctx, devcluster.EC2MetadataMock, os.Stderr)
	})
	if binary.err != nil {
		t.Fatalf("building %s: %v", devcluster.EC2MetadataMock, binary.err)
	}
	return binary.path
}

// Mock is an amazon-ec2-metadata-mock that requires IMDSv2 tokens.
type Mock struct {
	t    testing.TB
	args []string
	port string
	dir  string

	cmd  *exec.Cmd
	done chan struct{}
	logs *os.File
}

// NewMock prepares a mock with args (a command such as "spot" and its
// flags) on a free port, not started; it is stopped when the test ends.
func NewMock(t testing.TB, args ...string) *Mock {
	t.Helper()
	m := &Mock{t: t, args: args, port: freePort(t), dir: t.TempDir()}
	t.Cleanup(m.Stop)
	return m
}

// StartMock starts a mock with args until the test ends.
func StartMock(t testing.TB, args ...string) *Mock {
	t.Helper()
	m := NewMock(t, args...)
	m.Start()
	return m
}

func freePort(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
}

// URL is the mock's endpoint.
func (m *Mock) URL() string { return "http://127.0.0.1:" + m.port }

// Start starts the mock (again, after Stop, on the same port) and waits
// until it hands out tokens.
func (m *Mock) Start() {
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
		if _, err := Token(m.URL(), "60"); err == nil {
			return
		}
		select {
		case <-m.done:
			m.t.Fatalf("the metadata mock %v exited:\n%s", args, m.LogTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("the metadata mock %v does not answer after %s:\n%s", args, waitTimeout, m.LogTail())
		}
	}
}

// Stop kills the mock and waits until it has exited.
func (m *Mock) Stop() {
	if m.cmd == nil {
		return
	}
	_ = m.cmd.Process.Kill()
	<-m.done
	_ = m.logs.Close()
	m.cmd = nil
}

// LogTail is the end of the mock's log.
func (m *Mock) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "mock.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}

// Token gets an IMDSv2 token from endpoint, with a TTL in seconds.
func Token(endpoint, ttl string) (string, error) {
	req, err := http.NewRequest(http.MethodPut, endpoint+"/latest/api/token", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", ttl)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("token: status %d", resp.StatusCode)
	}
	return strings.TrimSpace(string(b)), nil
}
