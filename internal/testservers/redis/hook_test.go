package redis_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The recipe's configuration, as vacate-hook reads it (unknown fields are
// refused).
type hookConfig struct {
	Listen         string     `json:"listen,omitempty"`
	Path           string     `json:"path,omitempty"`
	StateDir       string     `json:"stateDir"`
	StatusInterval string     `json:"statusInterval,omitempty"`
	RetryInterval  string     `json:"retryInterval,omitempty"`
	Maintenance    hookSteps  `json:"maintenance"`
	Decommission   *hookSteps `json:"decommission,omitempty"`
}

type hookSteps struct {
	Evacuate []hookCommand `json:"evacuate"`
	Status   *hookCommand  `json:"status,omitempty"`
	Cancel   []hookCommand `json:"cancel,omitempty"`
}

type hookCommand struct {
	Command []string `json:"command"`
	Timeout string   `json:"timeout,omitempty"`
}

// recipeDir holds the recipe; the pod mounts it at /etc/vacate-hook.
const (
	recipeDir = "../../../examples/redis-sentinel"
	mountDir  = "/etc/vacate-hook/"
)

// hookRunner runs a recipe's commands as vacate-hook does (argv without a
// shell, its environment plus VACATE_*, each command's process group killed
// at its timeout or on cancel), for one member. It stands in for vacate-hook
// until the real one is wired in; its intervals are shortened for the test.
type hookRunner struct {
	t    *testing.T
	cfg  hookConfig
	env  []string
	node string

	mu      sync.Mutex
	seq     int
	drainID string
	started map[string]bool // modes whose evacuate was started
}

func newHookRunner(t *testing.T, env []string, node string) *hookRunner {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(recipeDir, "vacate-hook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg hookConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("vacate-hook.yaml: %v", err)
	}
	if cfg.StateDir == "" || len(cfg.Maintenance.Evacuate) == 0 {
		t.Fatal("vacate-hook.yaml: stateDir and maintenance.evacuate are required")
	}
	return &hookRunner{t: t, cfg: cfg, env: env, node: node}
}

// begin starts a new drain (a new VACATE_DRAIN).
func (h *hookRunner) begin() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	h.drainID = fmt.Sprintf("drain-%s-%d", h.node, h.seq)
	h.started = map[string]bool{}
}

func (h *hookRunner) steps(mode string) hookSteps {
	if mode == "Decommission" && h.cfg.Decommission != nil {
		return *h.cfg.Decommission
	}
	return h.cfg.Maintenance
}

// exec runs one command; onLine sees each line of its output as it comes.
// It returns the output and whether it exited 0.
func (h *hookRunner) exec(ctx context.Context, mode, step string, c hookCommand, onLine func(string)) (string, error) {
	timeout := 5 * time.Minute
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil {
			return "", fmt.Errorf("timeout %q: %w", c.Timeout, err)
		}
		timeout = d
	}
	argv := append([]string(nil), c.Command...)
	for i, a := range argv {
		if rest, ok := strings.CutPrefix(a, mountDir); ok {
			argv[i] = filepath.Join(recipeDir, rest)
		}
	}
	h.mu.Lock()
	drain := h.drainID
	h.started[mode] = h.started[mode] || step == "evacuate"
	h.mu.Unlock()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), h.env...),
		"VACATE_DRAIN="+drain, "VACATE_RUN="+drain+"-run", "VACATE_NODE="+h.node,
		"VACATE_MODE="+mode, "VACATE_STEP="+step)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		_ = pr.Close()
		_ = pw.Close()
		return "", err
	}
	_ = pw.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	killed := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		select {
		case <-exited:
			return
		case <-ctx.Done():
		}
		close(killed)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}()
	var out strings.Builder
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if onLine != nil {
			onLine(sc.Text())
		}
	}
	_ = pr.Close()
	err = cmd.Wait()
	close(exited)
	// Whatever the script left in its group goes with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-killed:
		return out.String(), fmt.Errorf("killed: %w", ctx.Err())
	default:
	}
	return out.String(), err
}

// lastLine is the last non-empty line: the message vacate shows.
func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// evacuate runs the evacuate commands once, in order; it stops at the
// first that fails and returns its message.
func (h *hookRunner) evacuate(ctx context.Context, mode string, onLine func(string)) (string, error) {
	msg := ""
	for _, c := range h.steps(mode).Evacuate {
		out, err := h.exec(ctx, mode, "evacuate", c, onLine)
		msg = lastLine(out)
		if err != nil {
			return msg, fmt.Errorf("%v: %w", c.Command, err)
		}
	}
	return msg, nil
}

// status runs the status command and reads its answer as vacate-hook does:
// anything but a well-formed answer from a command that exited 0 is
// InProgress.
func (h *hookRunner) status(ctx context.Context, mode string) (state, msg string) {
	s := h.steps(mode).Status
	if s == nil {
		return "Completed", "no status step"
	}
	out, err := h.exec(ctx, mode, "status", *s, nil)
	if err != nil {
		return "InProgress", fmt.Sprintf("status failed: %v: %s", err, lastLine(out))
	}
	first, rest, _ := strings.Cut(out, "\n")
	switch first {
	case "InProgress", "Completed", "Failed":
		return first, strings.TrimSpace(rest)
	}
	return "InProgress", "status answered " + first
}

// cancel runs the cancel commands of each mode whose evacuate was started
// (Decommission's first), each retried until it exits 0.
func (h *hookRunner) cancel(ctx context.Context) error {
	h.mu.Lock()
	started := h.started
	h.mu.Unlock()
	for _, mode := range []string{"Decommission", "Maintenance"} {
		if !started[mode] {
			continue
		}
		for _, c := range h.steps(mode).Cancel {
			if err := retry(ctx, func() error {
				out, err := h.exec(ctx, mode, "cancel", c, nil)
				if err != nil {
					return fmt.Errorf("%w: %s", err, lastLine(out))
				}
				return nil
			}); err != nil {
				return fmt.Errorf("cancel %v: %w", c.Command, err)
			}
		}
	}
	return nil
}

// drain runs a drain to Completed: evacuate until it succeeds, then status
// until it says Completed. Each status answer goes to onStatus.
func (h *hookRunner) drain(ctx context.Context, mode string, onStatus func(state, msg string)) (string, error) {
	h.begin()
	if err := retry(ctx, func() error {
		msg, err := h.evacuate(ctx, mode, nil)
		if err != nil {
			h.t.Logf("evacuate on %s: %s (run again)", h.node, msg)
			return fmt.Errorf("%w: %s", err, msg)
		}
		h.t.Logf("evacuate on %s: %s", h.node, msg)
		return nil
	}); err != nil {
		return "", err
	}
	var last string
	err := retry(ctx, func() error {
		state, msg := h.status(ctx, mode)
		if onStatus != nil {
			onStatus(state, msg)
		}
		if state != last {
			h.t.Logf("status on %s: %s: %s", h.node, state, msg)
			last = state
		}
		if state != "Completed" {
			return errors.New(msg)
		}
		last = msg
		return nil
	})
	return last, err
}

// retry calls f until it returns nil, 100 ms apart, or ctx ends.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestManifestHoldsTheRecipe checks that the ConfigMap of
// examples/redis-sentinel/manifests.yaml holds the recipe's files verbatim.
func TestManifestHoldsTheRecipe(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(recipeDir, "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"config.yaml": "vacate-hook.yaml", "redis-sentinel.sh": "redis-sentinel.sh"}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var cm struct {
			Kind string            `json:"kind"`
			Data map[string]string `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(doc+"\n"), &cm); err != nil {
			t.Fatal(err)
		}
		if cm.Kind != "ConfigMap" {
			continue
		}
		for key, file := range want {
			b, err := os.ReadFile(filepath.Join(recipeDir, file))
			if err != nil {
				t.Fatal(err)
			}
			if cm.Data[key] != string(b) {
				t.Errorf("manifests.yaml's ConfigMap %s differs from %s", key, file)
			}
		}
		return
	}
	t.Fatal("manifests.yaml has no ConfigMap")
}
