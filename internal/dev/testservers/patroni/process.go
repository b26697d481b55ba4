package patroni

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// process is one server process and, for Patroni, the PostgreSQL it spawns:
// Patroni starts the postmaster in a session of its own (setsid), so it is
// neither Patroni's child nor in its process group, and is found through
// its postmaster.pid file.
type process struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	// postmasterPID is the path of the postmaster.pid file of the
	// PostgreSQL this process manages ("" for none).
	postmasterPID string
}

func startProcess(bin string, args, env []string, cred *syscall.Credential, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, args...)
	cmd.Dir = filepath.Dir(logPath)
	if env != nil {
		cmd.Env = env
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, logPath: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process and, after grace (at once when grace is
// 0), SIGKILL to its process group and to its PostgreSQL's processes, and
// waits for all of them to be gone.
func (p *process) stop(grace time.Duration) {
	pid := p.cmd.Process.Pid
	if grace > 0 {
		_ = syscall.Kill(pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	// The postmaster and its children (each child is a session leader of
	// its own, so a group kill does not reach them).
	pg := p.postgresPIDs()
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, q := range pg {
		_ = syscall.Kill(q, syscall.SIGKILL)
	}
	<-p.done
	deadline := time.Now().Add(30 * time.Second)
	for _, q := range pg {
		for alive(q) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// postgresPIDs is the postmaster named in postmaster.pid, if it runs a
// postgres, and its children.
func (p *process) postgresPIDs() []int {
	if p.postmasterPID == "" {
		return nil
	}
	data, err := os.ReadFile(p.postmasterPID)
	if err != nil {
		return nil
	}
	first, _, _ := strings.Cut(string(data), "\n")
	pm, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || !alive(pm) || !isPostgres(pm) {
		return nil
	}
	return append([]int{pm}, testservers.Children(pm)...)
}

// alive says whether pid runs (a zombie does not).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, ok := bytes.Cut(data, []byte(") "))
	return ok && len(rest) > 0 && rest[0] != 'Z' && rest[0] != 'X'
}

func isPostgres(pid int) bool {
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return err == nil && filepath.Base(exe) == "postgres"
}

func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	return tail(data, 4000)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
