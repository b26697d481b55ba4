package devcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
)

// restartTimeout bounds how long a restarted component may take to become
// healthy again.
const restartTimeout = 2 * time.Minute

// Faults for tests: a component frozen, continued, or killed and started
// again, while the rest of the cluster runs. They act on the processes this
// program started (not on a cluster found through its State file).

// Pause freezes a component (SIGSTOP): its process keeps its sockets and
// state but answers nothing until Resume. It returns once every thread of
// the process is stopped: the signal is delivered asynchronously, and a
// thread inside a system call (a disk write on a loaded machine) stops only
// when the call returns.
func (c *Cluster) Pause(name string) error {
	if err := c.signal(name, syscall.SIGSTOP); err != nil {
		return err
	}
	comp, err := c.component(name)
	if err != nil {
		return err
	}
	pid := comp.proc.pid()
	var last string
	err = wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, pauseTimeout, true, func(context.Context) (bool, error) {
		var stopped bool
		stopped, last = allThreadsStopped(pid)
		return stopped, nil
	})
	if err != nil {
		return fmt.Errorf("%s (pid %d) did not stop within %s: %s", name, pid, pauseTimeout, last)
	}
	return nil
}

// pauseTimeout bounds how long Pause waits for a process's threads to stop.
const pauseTimeout = 10 * time.Second

// allThreadsStopped reports whether every thread of the process is in the
// stopped state (T in /proc/PID/task/TID/stat), and if not, which is not.
func allThreadsStopped(pid int) (bool, string) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return false, err.Error()
	}
	for _, task := range tasks {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			return false, err.Error()
		}
		// The state follows the command name, which is in parentheses.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 || i+2 >= len(stat) {
			return false, fmt.Sprintf("unreadable stat of thread %s", task.Name())
		}
		if state := stat[i+2]; state != 'T' && state != 't' {
			return false, fmt.Sprintf("thread %s is in state %c", task.Name(), state)
		}
	}
	return true, ""
}

// Resume continues a component that Pause froze (SIGCONT).
func (c *Cluster) Resume(name string) error {
	return c.signal(name, syscall.SIGCONT)
}

func (c *Cluster) signal(name string, sig syscall.Signal) error {
	comp, err := c.component(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(comp.proc.pid(), sig); err != nil {
		return fmt.Errorf("sending %v to %s (pid %d): %w", sig, name, comp.proc.pid(), err)
	}
	return nil
}

// Restart kills a component (SIGKILL, as a crash would), starts it again
// with the same binary, flags, ports and certificates, and waits until it is
// healthy. The new pid is written to the State file, so `vacate dev down`
// still stops everything.
func (c *Cluster) Restart(ctx context.Context, name string) error {
	comp, err := c.component(name)
	if err != nil {
		return err
	}
	old := comp.proc.pid()
	_ = syscall.Kill(-old, syscall.SIGKILL)
	<-comp.proc.done
	p := &process{name: comp.proc.name, bin: comp.proc.bin, args: comp.proc.args, logPath: comp.proc.logPath}
	if err := p.start(c.detach); err != nil {
		return &ComponentError{Component: name, LogPath: p.logPath, LogTail: p.logTail(), Err: err}
	}
	comp.proc = p
	for i, q := range c.procs {
		if q.name == name {
			c.procs[i] = p
		}
	}
	for i := range c.Components {
		if c.Components[i].Name == name && c.Components[i].PID == old {
			c.Components[i].PID = p.pid()
		}
	}
	if err := c.recordPIDs(); err != nil {
		return err
	}
	if err := comp.waitHealthy(ctx, restartTimeout); err != nil {
		return err
	}
	if name == KubeAPIServer {
		return c.waitAuthorizing(ctx, restartTimeout)
	}
	return nil
}

// waitAuthorizing waits until a restarted API server's RBAC authorizer has
// loaded the roles: it reports ready before that, and refuses (403) the
// requests of every user but cluster admins for a few seconds.
func (c *Cluster) waitAuthorizing(ctx context.Context, timeout time.Duration) error {
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               "system:kube-scheduler",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "pods"},
	}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the restarted API server to authorize requests: %w", err)
	}
	return nil
}

// recordPIDs writes the current pids into the State file, keeping the
// processes attached to it since (Attach) that this program does not know.
func (c *Cluster) recordPIDs() error {
	s, err := ReadState(c.Dir)
	if err != nil {
		return fmt.Errorf("recording the new pid: %w", err)
	}
	pids := map[string]int{}
	for _, comp := range c.Components {
		pids[comp.Name] = comp.PID
	}
	for i, comp := range s.Components {
		if pid, ok := pids[comp.Name]; ok && !comp.Extra {
			s.Components[i].PID = pid
		}
	}
	return writeState(s)
}

func (c *Cluster) component(name string) (*component, error) {
	comp, ok := c.comps[name]
	if !ok {
		return nil, fmt.Errorf("component %q was not started by this program", name)
	}
	return comp, nil
}
