package devcluster

import (
	"context"
	"fmt"
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
// state but answers nothing until Resume.
func (c *Cluster) Pause(name string) error {
	return c.signal(name, syscall.SIGSTOP)
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
