package patroni

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// recipeDir holds the recipe as the ConfigMap mounts it at /etc/vacate-hook.
const recipeDir = "../../../examples/postgresql-patroni"

// hookConfig is the part of vacate-hook's configuration this test runs.
type hookConfig struct {
	Listen         string `json:"listen,omitempty"`
	Path           string `json:"path,omitempty"`
	StateDir       string `json:"stateDir"`
	StatusInterval string `json:"statusInterval,omitempty"`
	RetryInterval  string `json:"retryInterval,omitempty"`
	Maintenance    *steps `json:"maintenance"`
	Decommission   *steps `json:"decommission,omitempty"`
}

type steps struct {
	Evacuate []command `json:"evacuate"`
	Status   *command  `json:"status,omitempty"`
	Cancel   []command `json:"cancel,omitempty"`
}

type command struct {
	Command []string `json:"command"`
	Timeout string   `json:"timeout,omitempty"`
}

// hook runs the recipe's commands for one member as vacate-hook will: argv
// as written (the ConfigMap's /etc/vacate-hook/ mapped to the recipe's
// folder), the sidecar's environment plus VACATE_*, each command in its own
// process group, killed (SIGTERM, then SIGKILL) at its timeout. It stands in
// for vacate-hook until the dev-cluster test runs the real one.
type hook struct {
	t      *testing.T
	cfg    hookConfig
	env    []string
	member string
	quiet  bool // no log of each command
}

func loadHook(t *testing.T, c *Cluster, i int) *hook {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(recipeDir, "vacate-hook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg hookConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("the recipe's configuration: %v", err)
	}
	if cfg.StateDir == "" || cfg.Maintenance == nil || len(cfg.Maintenance.Evacuate) == 0 {
		t.Fatalf("the recipe's configuration lacks stateDir or maintenance.evacuate: %+v", cfg)
	}
	return &hook{t: t, cfg: cfg, env: append(os.Environ(), c.SidecarEnv(i)...), member: Name(i)}
}

// steps are the mode's steps: a Decommission without its own runs
// Maintenance's.
func (h *hook) steps(mode string) *steps {
	if mode == "Decommission" && h.cfg.Decommission != nil {
		return h.cfg.Decommission
	}
	return h.cfg.Maintenance
}

// run runs one command and returns its output and error.
func (h *hook) run(ctx context.Context, c command, mode, step string) (string, error) {
	timeout := 5 * time.Minute
	if c.Timeout != "" {
		d, err := time.ParseDuration(c.Timeout)
		if err != nil {
			h.t.Fatalf("timeout %q: %v", c.Timeout, err)
		}
		timeout = d
	}
	argv := make([]string, len(c.Command))
	for i, a := range c.Command {
		if rest, ok := strings.CutPrefix(a, "/etc/vacate-hook/"); ok {
			a = filepath.Join(recipeDir, rest)
		}
		argv[i] = a
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(append([]string{}, h.env...),
		"VACATE_DRAIN=drain-uid-"+h.member, "VACATE_RUN=run-1", "VACATE_NODE=node-of-"+h.member,
		"VACATE_MODE="+mode, "VACATE_STEP="+step)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if h.quiet {
		return out.String(), err
	}
	h.t.Logf("%s %s %s %q: %v\n%s", h.member, mode, step, c.Command, err, strings.TrimSpace(out.String()))
	return out.String(), err
}

// evacuate runs the mode's evacuate commands once, in order, and returns
// the last non-empty line of the first that failed, as the drain's message.
func (h *hook) evacuate(ctx context.Context, mode string) (message string, err error) {
	for _, c := range h.steps(mode).Evacuate {
		out, err := h.run(ctx, c, mode, "evacuate")
		if err != nil {
			return lastLine(out), err
		}
	}
	return "", nil
}

// status runs the mode's status command once and reads its answer; an
// answer that cannot be read is InProgress.
func (h *hook) status(ctx context.Context, mode string) (state, message string) {
	s := h.steps(mode).Status
	if s == nil {
		return "Completed", "evacuate succeeded"
	}
	out, err := h.run(ctx, *s, mode, "status")
	if err != nil {
		return "InProgress", fmt.Sprintf("status failed: %v: %s", err, lastLine(out))
	}
	first, rest, _ := strings.Cut(strings.TrimLeft(out, "\n"), "\n")
	switch first = strings.TrimSpace(first); first {
	case "InProgress", "Completed", "Failed":
		return first, strings.TrimSpace(rest)
	}
	return "InProgress", "unreadable status: " + lastLine(out)
}

// cancel runs the cancel commands of the mode once each, in order.
func (h *hook) cancel(ctx context.Context, mode string) error {
	for _, c := range h.steps(mode).Cancel {
		if out, err := h.run(ctx, c, mode, "cancel"); err != nil {
			return fmt.Errorf("%v: %s", err, lastLine(out))
		}
	}
	return nil
}

// interval is a duration of the configuration, def when unset.
func (h *hook) interval(value string, def time.Duration) time.Duration {
	if value == "" {
		return def
	}
	d, err := time.ParseDuration(value)
	if err != nil {
		h.t.Fatal(err)
	}
	return d
}

// drain runs evacuate (again after retryInterval if it fails, at most three
// times) and then status every
// statusInterval until Completed, calling check after every status answer
// with the state it gave, and returns how many status runs it took.
func (h *hook) drain(ctx context.Context, mode string, check func(state, message string)) int {
	h.t.Helper()
	for attempt := 1; ; attempt++ {
		msg, err := h.evacuate(ctx, mode)
		if err == nil {
			break
		}
		// vacate-hook runs evacuate again after retryInterval; a third
		// failure here means something is wrong, not slow.
		if attempt == 3 {
			h.t.Fatalf("%s: evacuate failed %d times, last: %v: %s", h.member, attempt, err, msg)
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("%s: evacuate failed: %v: %s", h.member, err, msg)
		case <-time.After(h.interval(h.cfg.RetryInterval, 10*time.Second)):
		}
	}
	for n := 1; ; n++ {
		state, msg := h.status(ctx, mode)
		check(state, msg)
		switch state {
		case "Completed":
			return n
		case "Failed":
			h.t.Fatalf("%s: status Failed: %s", h.member, msg)
		}
		select {
		case <-ctx.Done():
			h.t.Fatalf("%s: no Completed before the test's deadline: %s", h.member, msg)
		case <-time.After(h.interval(h.cfg.StatusInterval, 5*time.Second)):
		}
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// sampler records the leader every 100 ms while a drain runs: the system's
// own view, throughout, not only at the end.
type sampler struct {
	stop    context.CancelFunc
	done    chan struct{}
	leaders []string // distinct leaders in the order seen ("" left out)
	errs    int
}

func sample(c *Cluster) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for ctx.Err() == nil {
			v, err := c.View(ctx)
			switch {
			case err != nil:
				s.errs++
			case v.Leader != "" && (len(s.leaders) == 0 || s.leaders[len(s.leaders)-1] != v.Leader):
				s.leaders = append(s.leaders, v.Leader)
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

func (s *sampler) Stop() []string { s.stop(); <-s.done; return s.leaders }

// statusRun is one run of the status command between two views.
type statusRun struct {
	before, after  View
	state, message string
}

// watcher runs a member's status command over and over.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	runs   []statusRun
	errs   int
}

func watchStatus(c *Cluster, h *hook, mode string) *watcher {
	h.quiet = true
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for ctx.Err() == nil {
			before, err1 := c.View(ctx)
			state, msg := h.status(ctx, mode)
			after, err2 := c.View(ctx)
			w.mu.Lock()
			if err1 != nil || err2 != nil || ctx.Err() != nil {
				w.errs++
			} else {
				w.runs = append(w.runs, statusRun{before: before, after: after, state: state, message: msg})
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return w
}

// waitInProgress waits for a first run that said InProgress.
func (w *watcher) waitInProgress(ctx context.Context) error {
	return poll(ctx, 30*time.Second, func() (bool, string) {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.ContainsFunc(w.runs, func(r statusRun) bool { return r.state == "InProgress" }),
			fmt.Sprintf("%d status runs, none InProgress", len(w.runs))
	})
}

func (w *watcher) stop() []statusRun {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.runs
}

// TestRecipe proves examples/postgresql-patroni against a real three-member
// cluster under a client load: a replica's drain is Completed at once and
// switches nothing; the primary's drain hands over to a replica and is
// Completed only once another member leads and accepts writes; cancel after
// that switchover leaves the new leader in place and the old primary
// rejoins as a replica; no committed transaction is lost. Then a primary
// with no healthy replica is refused a switchover, and its drain holds with
// Patroni's reason until the replicas are back; its evacuate, killed while
// Patroni switches over and run again, finishes the drain.
func TestRecipe(t *testing.T) {
	if _, err := os.Stat(patroniBin); err != nil {
		t.Skipf("patroni is not installed (make stateful-servers): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ips := loopbacks(t, "127.211.0.10", 4)
	started := time.Now()
	c, err := Start(ctx, Options{Dir: t.TempDir(), DCSIP: ips[0], MemberIPs: ips[1:], Log: testWriter{t}})
	if c != nil {
		t.Cleanup(c.Stop)
	}
	if err != nil {
		t.Fatalf("starting the cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
	})
	t.Logf("cluster of %d ready in %s", c.Len(), time.Since(started).Round(time.Millisecond))

	load, err := c.StartLoad(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := load.WaitAcked(ctx, 50); err != nil {
		t.Fatal(err)
	}
	before := mustView(ctx, t, c)
	primary := c.Index(before.Leader)
	replica := (primary + 1) % c.Len()

	// 1. A replica's member: nothing to hand over, Completed at the first
	// status, and the leader stays.
	h := loadHook(t, c, replica)
	runs := h.drain(ctx, "Maintenance", func(state, msg string) {})
	if runs != 1 {
		t.Errorf("replica %s: Completed after %d status runs, want the first", Name(replica), runs)
	}
	if v := mustView(ctx, t, c); v.Leader != before.Leader || timeline(v, v.Leader) != timeline(before, before.Leader) {
		t.Errorf("draining replica %s switched something: before %s, after %s", Name(replica), before, v)
	}

	// 2. The primary's member, under load: a switchover; Completed only
	// once the leader is another member that accepts writes. Besides the
	// drain's own status runs, a watcher runs the status command over and
	// over through the switchover, each run between two views of the
	// system: it must never say Completed while this member leads.
	h = loadHook(t, c, primary)
	s := sample(c)
	w := watchStatus(c, loadHook(t, c, primary), "Maintenance")
	if err := w.waitInProgress(ctx); err != nil {
		t.Fatal(err)
	}
	h.drain(ctx, "Maintenance", func(state, msg string) {
		v := mustView(ctx, t, c)
		if state == "Completed" && (v.Leader == Name(primary) || v.Leader == "" || !c.AcceptsWrites(ctx, c.Index(v.Leader))) {
			t.Errorf("status said Completed (%s) while the view is %s", msg, v)
		}
	})
	if err := load.WaitAcked(ctx, 50); err != nil {
		t.Fatalf("the client does not commit after the switchover: %v", err)
	}
	leaders := s.Stop()
	if len(leaders) != 2 || leaders[0] != Name(primary) {
		t.Errorf("leaders seen during the drain: %q, want %s then one other", leaders, Name(primary))
	}
	seen := w.stop()
	var led, completed int
	for _, r := range seen {
		if r.after.Leader == Name(primary) {
			led++
		}
		switch {
		// The leader moves once (the sampler checks it), so a run that
		// ends with this member leading ran entirely while it led; one
		// that began then may have seen the move.
		case r.state == "Completed" && r.after.Leader == Name(primary):
			t.Errorf("status said Completed (%s) while %s led: before %s, after %s", r.message, Name(primary), r.before, r.after)
		case r.state == "Completed":
			completed++
		}
	}
	if led == 0 || completed == 0 {
		t.Errorf("the watcher's %d status runs saw %s lead in %d and said Completed in %d: want both", len(seen), Name(primary), led, completed)
	}
	after := mustView(ctx, t, c)
	t.Logf("after the switchover: %s; the watcher ran status %d times, %d while %s led, %d Completed", after, len(seen), led, Name(primary), completed)

	// 3. Cancel after the switchover: the recipe has no cancel step, so
	// the new leader stays and the old primary rejoins as a replica, and
	// nothing switches again.
	if err := h.cancel(ctx, "Maintenance"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("the old primary does not rejoin as a replica: %v", err)
	}
	if err := load.WaitAcked(ctx, 50); err != nil {
		t.Fatal(err)
	}
	if v := mustView(ctx, t, c); v.Leader != after.Leader || timeline(v, v.Leader) != timeline(after, after.Leader) {
		t.Errorf("something switched after the cancel: %s, then %s", after, v)
	}

	report, err := load.Stop(ctx)
	t.Log(report)
	if err != nil {
		t.Fatal(err)
	}
	if err := report.OK(); err != nil {
		t.Fatal(err)
	}

	// 4. No healthy replica: Patroni refuses the switchover, evacuate
	// fails with its reason (the drain's message) and the leader stays.
	leader := c.Index(after.Leader)
	var stopped []int
	for i := range c.Len() {
		if i != leader {
			c.StopMember(i, 30*time.Second)
			stopped = append(stopped, i)
		}
	}
	h = loadHook(t, c, leader)
	msg, err := h.evacuate(ctx, "Decommission")
	if err == nil || !strings.Contains(msg, "switchover") || !strings.Contains(msg, "not possible") {
		t.Errorf("evacuate without a healthy replica: %v, message %q; want a failure naming the refused switchover", err, msg)
	}
	if state, msg := h.status(ctx, "Decommission"); state != "InProgress" {
		t.Errorf("status without a healthy replica: %s %q, want InProgress", state, msg)
	}
	if v := mustView(ctx, t, c); v.Leader != Name(leader) || !c.AcceptsWrites(ctx, leader) {
		t.Errorf("the refused switchover moved the leader: %s", v)
	}
	for _, i := range stopped {
		if err := c.StartMember(i); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}

	// 5. The drain goes on, and its evacuate is killed while Patroni
	// carries the switchover out (as a cancel or a sidecar restart would
	// kill it): run again, it finishes the drain, and the leader moved
	// once.
	s = sample(c)
	requests := switchoverRequests(t, c, leader)
	killed, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := h.evacuate(killed, "Decommission"); done <- err }()
	err = poll(ctx, 30*time.Second, func() (bool, string) {
		return switchoverRequests(t, c, leader) > requests, "Patroni has not received the switchover request"
	})
	kill()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("evacuate killed while Patroni switches over: %v", <-done)
	h.drain(ctx, "Decommission", func(state, msg string) {
		if v := mustView(ctx, t, c); state == "Completed" && v.Leader == Name(leader) {
			t.Errorf("status said Completed (%s) while %s still leads: %s", msg, Name(leader), v)
		}
	})
	if leaders := s.Stop(); len(leaders) != 2 || leaders[0] != Name(leader) {
		t.Errorf("leaders seen during the killed drain: %q, want %s then one other", leaders, Name(leader))
	}

	// 6. The harness: a killed member leaves no PostgreSQL process behind
	// and rejoins when started again.
	c.KillMember(leader)
	if pids := (&process{postmasterPID: filepath.Join(c.members[leader].dir, "data", "postmaster.pid")}).postgresPIDs(); len(pids) > 0 {
		t.Errorf("PostgreSQL processes %v of %s outlive KillMember", pids, Name(leader))
	}
	if err := c.StartMember(leader); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatalf("%s does not rejoin after KillMember: %v", Name(leader), err)
	}
}

// switchoverRequests counts the switchover requests member i's Patroni has
// logged.
func switchoverRequests(t *testing.T, c *Cluster, i int) int {
	data, err := os.ReadFile(filepath.Join(c.members[i].dir, "patroni.log"))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("received switchover request"))
}

func mustView(ctx context.Context, t *testing.T, c *Cluster) View {
	t.Helper()
	var v View
	err := poll(ctx, 30*time.Second, func() (bool, string) {
		var err error
		v, err = c.View(ctx)
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func timeline(v View, name string) int {
	m, _ := v.Member(name)
	return m.Timeline
}

// loopbacks returns n consecutive IPs from first.
func loopbacks(t *testing.T, first string, n int) []netip.Addr {
	t.Helper()
	a, err := netip.ParseAddr(first)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
		a = a.Next()
	}
	return out
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
