package rabbitmq

import (
	"bytes"
	"context"
	"encoding/json"
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

// recipeDir is where examples/rabbitmq lives; its files stand for the
// ConfigMap mounted at /etc/vacate-hook.
var recipeDir, _ = filepath.Abs("../../../examples/rabbitmq")

// hookStep, hookMode and hookConfig are vacate-hook's configuration, read
// strictly as vacate-hook reads it.
type hookStep struct {
	Command []string `json:"command"`
	Timeout string   `json:"timeout,omitempty"`
}

type hookMode struct {
	Evacuate []hookStep `json:"evacuate"`
	Status   *hookStep  `json:"status,omitempty"`
	Cancel   []hookStep `json:"cancel,omitempty"`
}

type hookConfig struct {
	Listen         string    `json:"listen,omitempty"`
	Path           string    `json:"path,omitempty"`
	StateDir       string    `json:"stateDir"`
	StatusInterval string    `json:"statusInterval,omitempty"`
	RetryInterval  string    `json:"retryInterval,omitempty"`
	Maintenance    hookMode  `json:"maintenance"`
	Decommission   *hookMode `json:"decommission,omitempty"`
}

// runner runs the recipe's commands beside one member as vacate-hook will:
// argv run directly with the sidecar's environment and VACATE_*, each
// killed (its process group) at its timeout. It stands in for vacate-hook
// until that exists.
type runner struct {
	t       *testing.T
	c       *Cluster
	member  int
	drain   string
	modeCfg hookMode
	mode    string
}

func loadRecipe(t *testing.T) hookConfig {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(recipeDir, "vacate-hook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg hookConfig
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		t.Fatalf("reading vacate-hook.yaml: %v", err)
	}
	return cfg
}

func (r *runner) run(ctx context.Context, stepName string, s hookStep) (string, error) {
	timeout := 5 * time.Minute
	if s.Timeout != "" {
		d, err := time.ParseDuration(s.Timeout)
		if err != nil {
			r.t.Fatalf("timeout %q: %v", s.Timeout, err)
		}
		timeout = d
	}
	argv := make([]string, len(s.Command))
	for i, a := range s.Command {
		argv[i] = strings.Replace(a, "/etc/vacate-hook/", recipeDir+"/", 1)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	env := r.c.Env(r.member)
	cmd.Env = append(env, "VACATE_DRAIN="+r.drain, "VACATE_RUN="+r.drain+"-run", "VACATE_NODE=node-a",
		"VACATE_MODE="+r.mode, "VACATE_STEP="+stepName)
	// A name without a slash is looked up in the sidecar's PATH.
	for _, e := range env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok && !strings.Contains(argv[0], "/") {
			for _, dir := range filepath.SplitList(p) {
				if _, err := os.Stat(filepath.Join(dir, argv[0])); err == nil {
					cmd.Path = filepath.Join(dir, argv[0])
					break
				}
			}
		}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil && lastLine(stderr.String()) != "" {
		// vacate-hook shows a failed command's last line of stderr, else of stdout.
		return stdout.String() + "\n" + stderr.String(), err
	}
	return stdout.String(), err
}

// evacuate runs the evacuate commands once, in order, and returns the
// failing command's last non-empty output line as the error.
func (r *runner) evacuate(ctx context.Context) error {
	for _, s := range r.modeCfg.Evacuate {
		out, err := r.run(ctx, "evacuate", s)
		if err != nil {
			return fmt.Errorf("%s: %s", strings.Join(s.Command, " "), lastLine(out))
		}
	}
	return nil
}

func lastLine(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

type hookStatus struct {
	State     string `json:"state"`
	Message   string `json:"message"`
	Remaining int    `json:"remaining"`
}

// status runs the status command once and reads its answer as vacate-hook
// does (a failure or an unreadable answer is InProgress).
func (r *runner) status(ctx context.Context) hookStatus {
	out, err := r.run(ctx, "status", *r.modeCfg.Status)
	if err != nil {
		return hookStatus{State: "InProgress", Message: "status failed: " + lastLine(out)}
	}
	var s hookStatus
	if json.Unmarshal([]byte(strings.TrimSpace(out)), &s) == nil && s.State != "" {
		return s
	}
	lines := strings.SplitN(strings.TrimSpace(out), "\n", 2)
	switch lines[0] {
	case "InProgress", "Completed", "Failed":
		s.State = lines[0]
		if len(lines) > 1 {
			s.Message = lines[1]
		}
		return s
	}
	return hookStatus{State: "InProgress", Message: "unreadable status: " + out}
}

// cancelDrain runs the cancel commands in order, again until they all exit 0.
func (r *runner) cancelDrain(ctx context.Context) {
	r.t.Helper()
	eventually(r.t, ctx, 2*time.Minute, "cancel commands exit 0", func() error {
		for _, s := range r.modeCfg.Cancel {
			if out, err := r.run(ctx, "cancel", s); err != nil {
				return fmt.Errorf("%s: %v: %s", strings.Join(s.Command, " "), err, lastLine(out))
			}
		}
		return nil
	})
}

// eventually polls f until it returns nil, failing the test after timeout.
func eventually(t *testing.T, ctx context.Context, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// sampler records the cluster's view of its quorum queues, over and over,
// until stopped.
type sampler struct {
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	samples []Queues
}

func startSampler(ctx context.Context, c *Cluster) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-s.stop:
				return
			default:
			}
			if qs, err := c.Queues(ctx); err == nil {
				s.mu.Lock()
				s.samples = append(s.samples, qs)
				s.mu.Unlock()
			}
			// Each view is a CLI call (an Erlang VM): keep them few.
			select {
			case <-s.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) Stop() []Queues {
	close(s.stop)
	<-s.done
	return s.samples
}

// TestRecipe runs examples/rabbitmq/vacate-hook.yaml's commands beside
// member 0 of a three-node cluster under a client load: refused while
// another member is down, a Maintenance drain until Completed, its cancel, a
// Decommission (shrink) until Completed and its cancel; no confirmed message
// is lost.
func TestRecipe(t *testing.T) {
	if _, err := os.Stat(filepath.Join(BinDir, "rabbitmq-server")); err != nil {
		t.Skipf("RabbitMQ is not installed (make stateful-servers): %v", err)
	}
	ctx := context.Background()
	cfg := loadRecipe(t)
	if cfg.Decommission == nil || cfg.Maintenance.Status == nil || cfg.Decommission.Status == nil {
		t.Fatal("the recipe needs maintenance and decommission steps with status")
	}

	start := time.Now()
	c, err := Start(ctx, Config{IPs: []string{"127.210.0.1", "127.210.0.2", "127.210.0.3"}, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	t.Logf("three members running and clustered after %s", time.Since(start).Round(100*time.Millisecond))
	node := c.NodeName(0)

	queues := []string{"load-0", "load-1", "load-2"}
	for i, q := range queues {
		if err := c.DeclareQuorumQueue(i, q); err != nil {
			t.Fatal(err)
		}
	}
	load := StartLoad(LoadConfig{URLs: c.URLs(), Queues: queues, Pause: 20 * time.Millisecond})
	loadStopped := false
	t.Cleanup(func() {
		if !loadStopped {
			ctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			load.Stop(ctx)
		}
	})
	waitAcks := func(what string) {
		t.Helper()
		from := load.Acked()
		eventually(t, ctx, time.Minute, what, func() error {
			if n := load.Acked(); n < from+20 {
				return fmt.Errorf("%d messages confirmed since, want 20", n-from)
			}
			return nil
		})
	}
	waitAcks("the load writes")
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs.LedBy(node)) == 0 {
		t.Fatalf("%s leads no queue before the drain: %+v", node, qs)
	}

	maint := &runner{t: t, c: c, member: 0, drain: "drain-maintenance", modeCfg: cfg.Maintenance, mode: "Maintenance"}

	t.Log("(1) with member 2 stopped, member 0 is quorum-critical: evacuate is refused")
	if err := c.StopMember(2); err != nil {
		t.Fatal(err)
	}
	err = maint.evacuate(ctx)
	if err == nil || !strings.Contains(err.Error(), "would lose quorum") {
		t.Fatalf("evacuate with a member down: %v, want a refusal saying a queue would lose quorum", err)
	}
	t.Logf("refused: %v", err)
	if ns, err := c.Nodes(ctx); err != nil || ns.InMaintenance(node) {
		t.Fatalf("after the refusal: %+v, %v; want %s not under maintenance", ns, err, node)
	}
	if err := c.StartMember(ctx, 2); err != nil {
		t.Fatal(err)
	}
	waitAcks("the load writes with member 2 back")

	t.Log("(2) Maintenance: evacuate succeeds once member 2 is back, then status until Completed")
	samples := startSampler(ctx, c)
	eventually(t, ctx, 2*time.Minute, "evacuate (maintenance)", func() error { return maint.evacuate(ctx) })
	var st hookStatus
	eventually(t, ctx, 2*time.Minute, "status Completed (maintenance)", func() error {
		if st = maint.status(ctx); st.State != "Completed" {
			return fmt.Errorf("%s: %s", st.State, st.Message)
		}
		return nil
	})
	qs, err = c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if led := qs.LedBy(node); len(led) > 0 {
		t.Fatalf("status said Completed (%s) but %s leads %v", st.Message, node, led)
	}
	t.Logf("Completed: %s", st.Message)
	if ns, err := c.Nodes(ctx); err != nil || !ns.InMaintenance(node) {
		t.Fatalf("after the drain: %+v, %v; want %s under maintenance", ns, err, node)
	}
	if c.AcceptsClients(0) {
		t.Fatalf("%s under maintenance takes a new client", node)
	}
	waitAcks("the load writes while member 0 is drained")
	views := samples.Stop()
	leading := 0
	for _, s := range views {
		if len(s.LedBy(node)) > 0 {
			leading++
		}
	}
	t.Logf("%d of %d sampled views during the drain had %s leading a queue; the last leads none: %v", leading, len(views), node, views[len(views)-1].LedBy(node))
	if len(views[len(views)-1].LedBy(node)) > 0 {
		t.Fatalf("the last sampled view, after Completed, has %s leading %v", node, views[len(views)-1].LedBy(node))
	}

	t.Log("(3) cancel: member 0 is revived and takes clients again")
	maint.cancelDrain(ctx)
	eventually(t, ctx, time.Minute, "member 0 revived", func() error {
		ns, err := c.Nodes(ctx)
		if err != nil || ns.InMaintenance(node) {
			return fmt.Errorf("%+v, %v", ns, err)
		}
		if !c.AcceptsClients(0) {
			return errors.New("member 0 takes no client")
		}
		return nil
	})
	eventually(t, ctx, time.Minute, "member 0's replicas online", func() error { return replicasOnline(ctx, c, node, len(queues)) })
	waitAcks("the load writes after the cancel")

	t.Log("(4) Decommission: refused while member 2 is down, then shrink, status until Completed, cancel grows back")
	decom := &runner{t: t, c: c, member: 0, drain: "drain-decommission", modeCfg: *cfg.Decommission, mode: "Decommission"}
	if err := c.StopMember(2); err != nil {
		t.Fatal(err)
	}
	if err := decom.evacuate(ctx); err == nil {
		t.Fatal("decommission evacuate with a member down succeeded")
	} else {
		t.Logf("refused: %v", err)
	}
	if qs, err := c.Queues(ctx); err != nil || len(qs.WithMember(node)) != len(queues) {
		t.Fatalf("after the refusal %s is a member of %v (%v), want all %d queues", node, qs.WithMember(node), err, len(queues))
	}
	if err := c.StartMember(ctx, 2); err != nil {
		t.Fatal(err)
	}
	samples = startSampler(ctx, c)
	eventually(t, ctx, 2*time.Minute, "evacuate (decommission)", func() error { return decom.evacuate(ctx) })
	eventually(t, ctx, 2*time.Minute, "status Completed (decommission)", func() error {
		if st = decom.status(ctx); st.State != "Completed" {
			return fmt.Errorf("%s: %s", st.State, st.Message)
		}
		return nil
	})
	t.Logf("Completed: %s", st.Message)
	if qs, err := c.Queues(ctx); err != nil || len(qs.WithMember(node)) > 0 {
		t.Fatalf("status said Completed but %s is a member of %v (%v)", node, qs.WithMember(node), err)
	}
	shrunk := 0
	for _, s := range samples.Stop() {
		for _, q := range s {
			if contains(q.Members, node) {
				continue
			}
			shrunk++
			for _, m := range q.Members {
				if !contains(q.Online, m) {
					t.Errorf("queue %s lost %s while its member %s was offline: %+v", q.Name, node, m, q)
				}
			}
		}
	}
	t.Logf("%d sampled queue views without %s, each with all its other members online", shrunk, node)
	waitAcks("the load writes while member 0 is decommissioned")

	decom.cancelDrain(ctx)
	eventually(t, ctx, time.Minute, "member 0 revived and a member of every queue again", func() error {
		ns, err := c.Nodes(ctx)
		if err != nil || ns.InMaintenance(node) {
			return fmt.Errorf("%+v, %v", ns, err)
		}
		if !c.AcceptsClients(0) {
			return errors.New("member 0 takes no client")
		}
		return replicasOnline(ctx, c, node, len(queues))
	})
	waitAcks("the load writes after the decommission's cancel")

	stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	report := load.Stop(stopCtx)
	loadStopped = true
	t.Logf("%s; %d redeliveries", report, load.Redeliveries())
	if err := report.OK(); err != nil {
		t.Fatal(err)
	}
}

// replicasOnline is nil once node is an online member of all n queues.
func replicasOnline(ctx context.Context, c *Cluster, node string, n int) error {
	qs, err := c.Queues(ctx)
	if err != nil {
		return err
	}
	on := 0
	for _, q := range qs {
		if contains(q.Members, node) && contains(q.Online, node) {
			on++
		}
	}
	if on != n {
		return fmt.Errorf("%s is an online member of %d of %d queues: %+v", node, on, n, qs)
	}
	return nil
}

// TestManifestsCarryTheRecipe checks that the ConfigMap of
// examples/rabbitmq/manifests.yaml holds the recipe's files verbatim.
func TestManifestsCarryTheRecipe(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(recipeDir, "manifests.yaml"))
	if err != nil {
		t.Fatal(err)
	}
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
		for key, file := range map[string]string{"config.yaml": "vacate-hook.yaml", "rabbitmq.sh": "rabbitmq.sh"} {
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
