package devcluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before it is
// killed.
const stopGrace = 10 * time.Second

// ComponentError says which component failed, with the end of its log.
type ComponentError struct {
	Component string
	LogPath   string
	LogTail   string
	Err       error
}

func (e *ComponentError) Error() string {
	return fmt.Sprintf("%s failed to start: %v\n--- last lines of %s ---\n%s", e.Component, e.Err, e.LogPath, e.LogTail)
}

func (e *ComponentError) Unwrap() error { return e.Err }

// IsComponentError reports whether err is a ComponentError and returns it.
func IsComponentError(err error) (*ComponentError, bool) {
	var ce *ComponentError
	ok := errors.As(err, &ce)
	return ce, ok
}

// process is one component process started by this program.
type process struct {
	name    string
	bin     string
	args    []string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{} // closed when the process has exited
	waitErr error
}

// start runs the process with its output in its log file, in a session of its
// own so a terminal's Ctrl-C reaches only us and we stop it in order. Unless
// detach is set the kernel also kills it if this program dies.
func (p *process) start(detach bool) error {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("opening log of %s: %w", p.name, err)
	}
	defer logFile.Close()
	fmt.Fprintf(logFile, "=== %s %s %s\n", time.Now().Format(time.RFC3339), p.bin, strings.Join(p.args, " "))

	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if !detach {
		dieWithParent(cmd.SysProcAttr)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.done = make(chan struct{})
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	return nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended, and how.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		if p.waitErr == nil {
			return true, errors.New("exited")
		}
		return true, p.waitErr
	default:
		return false, nil
	}
}

// stop sends SIGTERM to the process group, waits, then kills it.
func (p *process) stop() {
	if p.cmd == nil {
		return
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
	// Anything left in the group (there should be nothing) goes too.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
}

// logTail returns the last lines of the process's log.
func (p *process) logTail() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	return tail(b, 30)
}

// ProcessAlive reports whether pid is a live (not zombie) process running the
// executable bin. It is how `down` makes sure it only signals processes that
// this cluster started, even after pids were reused.
func ProcessAlive(pid int, bin string) bool {
	if pid <= 0 {
		return false
	}
	if zombieOrGone(pid) {
		return false
	}
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe"))
	if err != nil {
		return false
	}
	return strings.TrimSuffix(exe, " (deleted)") == bin
}

// stopPID stops a process this program did not start (it belongs to a
// cluster started by an earlier `vacate dev up`): SIGTERM to its group, wait,
// then SIGKILL. It does nothing unless pid still runs bin.
func stopPID(pid int, bin string) error {
	if !ProcessAlive(pid, bin) {
		return nil
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(stopGrace)
	for time.Now().Before(deadline) {
		if !ProcessAlive(pid, bin) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100 && ProcessAlive(pid, bin); i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if ProcessAlive(pid, bin) {
		return fmt.Errorf("process %d (%s) did not exit after SIGKILL", pid, filepath.Base(bin))
	}
	return nil
}

// ProcessesUsing lists the pids of live processes whose command line
// mentions dir. Every component of a cluster names the cluster's directory in
// its flags, so this finds any process a cluster left behind.
func ProcessesUsing(dir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmdline), dir) {
			continue
		}
		if !zombieOrGone(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// zombieOrGone reports whether pid no longer runs: it does not exist, or it
// has exited and waits for its parent to reap it.
func zombieOrGone(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}
