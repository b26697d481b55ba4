package redis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one server process (redis-server or redis-sentinel) that can be
// stopped, killed, frozen and started again with the same configuration and
// data, as a pod's container would be.
type Process struct {
	// Name is "redis-<i>" or "sentinel-<i>".
	Name string
	// Addr is the host:port it listens on.
	Addr string

	bin     string
	args    []string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Start starts the process unless it runs. It does not wait for it to answer.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening the log of %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so that Stop and Kill reach the children Redis
	// forks (replication and snapshots); killed if the test process dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = logf.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// Log is the end of what the process wrote (its last 4 KB), for a failed
// test.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return string(data[max(0, len(data)-4096):])
}

// Running says whether the process was started and has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM (a clean shutdown) to the process group and waits for
// it to exit, then SIGKILL after 10 s.
func (p *Process) Stop() error { return p.end(syscall.SIGTERM, 10*time.Second) }

// Kill sends SIGKILL to the process group and waits for it to exit.
func (p *Process) Kill() error { return p.end(syscall.SIGKILL, 10*time.Second) }

// Freeze stops the process with SIGSTOP: its connections stay open and
// nothing answers, as with a machine that hangs. Thaw resumes it.
func (p *Process) Freeze() error { return p.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen process (SIGCONT).
func (p *Process) Thaw() error { return p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s is not running", p.Name)
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling %s: %w", p.Name, err)
	}
	return nil
}

func (p *Process) end(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return nil
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // a frozen process cannot handle SIGTERM
	_ = syscall.Kill(-pgid, sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children left in the group (a fork mid-snapshot) go too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	p.cmd, p.done = nil, nil
	return nil
}
