package patroni

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// This file starts, stops and disturbs one member, as Kubernetes or a failing
// node would: the test's faults.

// StartMember starts member i's Patroni (which starts its PostgreSQL, a
// replica cloned from the leader when its data directory is empty). It
// returns once the process runs; WaitHealthy waits for it to serve.
func (c *Cluster) StartMember(i int) error {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return fmt.Errorf("member %s is already running", m.name)
	}
	env := []string{
		"HOME=" + m.dir,
		"PATH=/usr/bin:/bin",
		"LANG=C.UTF-8",
		"LC_ALL=C.UTF-8",
	}
	p, err := startProcess(patroniBin, []string{filepath.Join(m.dir, "patroni.yml")}, env, c.cred,
		filepath.Join(m.dir, "patroni.log"))
	if err != nil {
		return fmt.Errorf("starting member %s: %w", m.name, err)
	}
	p.postmasterPID = filepath.Join(m.dir, "data", "postmaster.pid")
	m.proc = p
	fmt.Fprintf(c.opts.Log, "member %s started (patroni pid %d)\n", m.name, p.cmd.Process.Pid)
	return nil
}

// StopMember stops member i as Kubernetes stops a pod: SIGTERM to Patroni,
// which shuts PostgreSQL down (a leader hands its lock back first), then
// SIGKILL to whatever is left after grace.
func (c *Cluster) StopMember(i int, grace time.Duration) {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil {
		m.proc.stop(grace)
		m.proc = nil
		fmt.Fprintf(c.opts.Log, "member %s stopped\n", m.name)
	}
}

// KillMember kills member i at once, Patroni and every PostgreSQL process
// (SIGKILL), as a node that dies would.
func (c *Cluster) KillMember(i int) { c.StopMember(i, 0) }

// Running says whether member i's Patroni process runs.
func (c *Cluster) Running(i int) bool {
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited()
}

// FreezeWALReceiver stops member i's WAL receiver (SIGSTOP), as a replica
// whose link to the primary stalls: it receives no more WAL, so it lags
// behind as the primary writes, while its Patroni and PostgreSQL answer
// as before. thaw resumes it; call it before the primary's walsender gives
// up on the silent receiver (wal_sender_timeout, 60 s).
func (c *Cluster) FreezeWALReceiver(i int) (thaw func(), err error) {
	m := c.members[i]
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("member %s is stopped", m.name)
	}
	pg := p.postgresPIDs()
	for _, pid := range pg {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !strings.Contains(string(cmdline), "walreceiver") {
			continue
		}
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return nil, fmt.Errorf("freezing the WAL receiver of %s: %w", m.name, err)
		}
		fmt.Fprintf(c.opts.Log, "the WAL receiver of %s (pid %d) is frozen\n", m.name, pid)
		var once sync.Once
		return func() {
			once.Do(func() {
				_ = syscall.Kill(pid, syscall.SIGCONT)
				fmt.Fprintf(c.opts.Log, "the WAL receiver of %s is thawed\n", m.name)
			})
		}, nil
	}
	return nil, fmt.Errorf("member %s runs no WAL receiver (is it a streaming replica?): its PostgreSQL's processes are %v", m.name, pg)
}
