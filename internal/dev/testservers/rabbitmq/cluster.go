// Package rabbitmq runs a real RabbitMQ cluster (Debian's rabbitmq-server)
// as local processes, one node per simulated pod on that pod's loopback IP,
// with a client load of publishers (publisher confirms) and a consumer on
// quorum or classic queues, for the tests and benchmarks that prove
// examples/rabbitmq (docs/recipes/rabbitmq.md).
//
// Every node of a cluster shares one epmd that the cluster starts on a port
// of its own, listening on the members' IPs (and, as epmd always does, on
// 127.0.0.1 and ::1 at that port); nothing listens on all interfaces. Every
// node's AMQP listener is its IP at the cluster's AMQP port, as in pods (by
// default one the kernel said was free, not 5672), its distribution port is
// one the kernel chose, and the CLI tools run beside member i (Env) listen on
// member i's IP only, in a range of ports the cluster holds for them on
// 127.0.0.1. So two clusters on one machine never collide, even on the same
// IPs.
package rabbitmq

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// BinDir holds the RabbitMQ scripts run directly, without the Debian
// wrapper's switch to the rabbitmq user.
const BinDir = "/usr/lib/rabbitmq/bin"

// CtlDistPorts is how many distribution ports a cluster gives the CLI tools
// (RABBITMQ_CTL_DIST_PORT_MIN to _MAX), RabbitMQ's own default width. Each
// run of a tool is an Erlang VM listening on the first of them free on its
// member's IP, so the limit is on the tools running at once beside one
// member: its sidecar's (one command at a time per drain) and the test's
// own calls, a few at most.
const CtlDistPorts = 11

// ErlArgs are the runtime flags every node runs with: one scheduler, no busy
// waiting (an idle node then costs little CPU on a shared machine).
const ErlArgs = "+S 1:1 +sbwt none +sbwtdcpu none +sbwtdio none"

// Config describes a cluster to start.
type Config struct {
	// IPs are the members' IPs, one a member (the simulated pods' IPs, any
	// 127.x.y.z). Required.
	IPs []string
	// Dir holds the members' data, logs and the Erlang cookie (a
	// t.TempDir()). Required.
	Dir string
	// StartTimeout bounds each member's boot; default 4 minutes. A boot
	// takes about 25 s on an idle 2-core machine, and a restart in a
	// suite that keeps both cores busy once took over 2 minutes (CI).
	StartTimeout time.Duration
	// AMQPPort is every member's AMQP port, on the member's own IP, as in
	// pods (0: a port Start finds free on every address, not 5672, so that
	// two clusters on the same IPs do not collide).
	AMQPPort int
}

// Cluster is a running RabbitMQ cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg      Config
	home     string
	epmdPort int
	epmd     *exec.Cmd
	epmdDone chan struct{}
	// ctlDistMin is the first of the CtlDistPorts ports of the CLI tools'
	// distribution listeners, which ctlDistHold holds on 127.0.0.1 until
	// Stop (reserveCtlDistPorts).
	ctlDistMin  int
	ctlDistHold []net.Listener

	mu      sync.Mutex
	members []*member
}

type member struct {
	index    int
	name, ip string
	distPort int
	dir      string
	starts   int
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd exits
}

// Start starts a cluster of len(cfg.IPs) members: member 0 first, then the
// others, which join it through classic peer discovery. It returns once
// every member runs and sees every other; on error it stops what it started.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if len(cfg.IPs) == 0 || cfg.Dir == "" {
		return nil, errors.New("rabbitmq: Config needs IPs and Dir")
	}
	if cfg.AMQPPort < 0 || cfg.AMQPPort > 65535 {
		return nil, fmt.Errorf("rabbitmq: port %d is not a TCP port (1 to 65535, or 0 for a free one)", cfg.AMQPPort)
	}
	if cfg.StartTimeout == 0 {
		cfg.StartTimeout = 4 * time.Minute
	}
	c := &Cluster{cfg: cfg, home: filepath.Join(cfg.Dir, "home")}
	ok := false
	defer func() {
		if !ok {
			_ = c.Stop()
		}
	}()
	if err := c.prepare(); err != nil {
		return nil, err
	}
	if err := c.startEPMD(); err != nil {
		return nil, err
	}
	if err := c.StartMember(ctx, 0); err != nil {
		return nil, err
	}
	errs := make(chan error, len(c.members))
	for i := 1; i < len(c.members); i++ {
		go func() { errs <- c.StartMember(ctx, i) }()
	}
	for i := 1; i < len(c.members); i++ {
		if err := <-errs; err != nil {
			return nil, err
		}
	}
	if err := c.awaitClustered(ctx); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

func (c *Cluster) prepare() error {
	if err := os.MkdirAll(c.home, 0o700); err != nil {
		return err
	}
	cookie := make([]byte, 16)
	if _, err := rand.Read(cookie); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.home, ".erlang.cookie"), []byte(strings.ToUpper(hex.EncodeToString(cookie))), 0o400); err != nil {
		return fmt.Errorf("writing the Erlang cookie: %w", err)
	}
	for _, ip := range c.cfg.IPs {
		if a := net.ParseIP(ip); a.To4() == nil || a.Equal(net.IPv4(127, 0, 0, 1)) {
			return fmt.Errorf("rabbitmq: %q is not an IPv4 address other than 127.0.0.1", ip)
		}
	}
	// First, so that the ports chosen next are none of the CLI tools'.
	var err error
	if c.ctlDistMin, c.ctlDistHold, err = reserveCtlDistPorts(c.cfg.IPs); err != nil {
		return err
	}
	ports, err := testservers.FreePorts(2 + len(c.cfg.IPs))
	if err != nil {
		return err
	}
	c.epmdPort = ports[0]
	if c.cfg.AMQPPort == 0 {
		c.cfg.AMQPPort = ports[1]
	}
	for i, ip := range c.cfg.IPs {
		m := &member{index: i, ip: ip, name: fmt.Sprintf("rabbit-%d@%s", i, ip), dir: filepath.Join(c.cfg.Dir, fmt.Sprintf("member-%d", i))}
		m.distPort = ports[2+i]
		for _, d := range []string{"mnesia", "log"} {
			if err := os.MkdirAll(filepath.Join(m.dir, d), 0o755); err != nil {
				return err
			}
		}
		conf := "loopback_users = none\n" +
			"cluster_formation.peer_discovery_backend = classic_config\n" +
			"cluster_formation.classic_config.nodes.1 = " + fmt.Sprintf("rabbit-0@%s", c.cfg.IPs[0]) + "\n"
		files := map[string]string{"rabbitmq.conf": conf, "enabled_plugins": "[].\n", "advanced.config": "[].\n", "rabbitmq-env.conf": ""}
		for f, content := range files {
			if err := os.WriteFile(filepath.Join(m.dir, f), []byte(content), 0o644); err != nil {
				return err
			}
		}
		c.members = append(c.members, m)
	}
	return nil
}

// reserveCtlDistPorts reserves CtlDistPorts consecutive ports for the CLI
// tools' distribution listeners: it holds them, listening on 127.0.0.1,
// until the cluster stops. No other cluster, of this run or another, can
// then reserve them (its listener on 127.0.0.1 would fail) or be given one
// by the kernel (freePorts listens on every address), while the tools, on
// their member's IP, can listen on them (hence no member may be 127.0.0.1).
// A range only checked free, or RabbitMQ's fixed 35672, would be shared by
// two clusters started at once on the same IPs. The first port is one the
// kernel picks free; a block with a port taken, on 127.0.0.1 or on a
// member's IP, is given up for another.
func reserveCtlDistPorts(ips []string) (first int, hold []net.Listener, err error) {
	release := func() {
		for _, l := range hold {
			l.Close()
		}
		hold = nil
	}
	for range 100 {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return 0, nil, fmt.Errorf("reserving the CLI tools' distribution ports: %w", err)
		}
		hold = append(hold, l)
		first = l.Addr().(*net.TCPAddr).Port
		if first+CtlDistPorts-1 > 65535 {
			release()
			continue
		}
		free := true
		for p := first + 1; free && p < first+CtlDistPorts; p++ {
			l, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", fmt.Sprint(p)))
			if free = err == nil; free {
				hold = append(hold, l)
			}
		}
		for p := first; free && p < first+CtlDistPorts; p++ {
			for _, ip := range ips {
				l, err := net.Listen("tcp4", net.JoinHostPort(ip, fmt.Sprint(p)))
				if free = err == nil; !free {
					break
				}
				l.Close()
			}
		}
		if free {
			return first, hold, nil
		}
		release()
	}
	return 0, nil, fmt.Errorf("reserving the CLI tools' distribution ports: found no %d consecutive free ports in 100 tries", CtlDistPorts)
}

func (c *Cluster) startEPMD() error {
	cmd := exec.Command("epmd", "-port", fmt.Sprint(c.epmdPort), "-address", strings.Join(c.cfg.IPs, ","))
	out, err := os.Create(filepath.Join(c.cfg.Dir, "epmd.log"))
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("starting epmd: %w", err)
	}
	c.epmd, c.epmdDone = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); out.Close(); close(c.epmdDone) }()
	// A node finding no epmd would start one of its own, listening on
	// every interface: wait until ours listens.
	addr := net.JoinHostPort(c.cfg.IPs[0], fmt.Sprint(c.epmdPort))
	for deadline := time.Now().Add(10 * time.Second); ; {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-c.epmdDone:
			return fmt.Errorf("epmd on port %d exited: %w", c.epmdPort, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("epmd does not listen on %s: %w", addr, err)
		}
	}
}

// Size is the number of members.
func (c *Cluster) Size() int { return len(c.members) }

// AMQPPort is every member's AMQP port, on its own IP (Config.AMQPPort, or
// the one Start chose).
func (c *Cluster) AMQPPort() int { return c.cfg.AMQPPort }

// NodeName is member i's Erlang node name, such as rabbit-0@127.210.0.1.
func (c *Cluster) NodeName(i int) string { return c.members[i].name }

// URL is member i's AMQP URL (the default guest user, allowed from any
// address here).
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("amqp://guest:guest@%s/", net.JoinHostPort(c.members[i].ip, fmt.Sprint(c.cfg.AMQPPort)))
}

// URLs are every member's AMQP URL, in member order.
func (c *Cluster) URLs() []string {
	urls := make([]string, len(c.members))
	for i := range c.members {
		urls[i] = c.URL(i)
	}
	return urls
}

// commonEnv is what both a node and the CLI beside it need.
func (c *Cluster) commonEnv(m *member) []string {
	return []string{
		"PATH=" + BinDir + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + c.home, // the Erlang cookie
		"LANG=C.UTF-8",
		"RABBITMQ_NODENAME=" + m.name,
		"RABBITMQ_USE_LONGNAME=true",
		"ERL_EPMD_PORT=" + fmt.Sprint(c.epmdPort),
		"ERL_EPMD_ADDRESS=" + strings.Join(c.cfg.IPs, ","),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(m.dir, "rabbitmq-env.conf"),
		"ERL_CRASH_DUMP=" + filepath.Join(m.dir, "erl_crash.dump"),
	}
}

// Env is the environment a sidecar beside member i runs its commands with,
// as vacate-hook in the RabbitMQ image would: the RabbitMQ CLI tools on
// PATH (run directly, no su), RABBITMQ_NODENAME naming member i (the tools'
// default target), the cluster's cookie in $HOME, the cluster's epmd, and
// the tools' own distribution listener on member i's IP only, in the
// cluster's range (reserveCtlDistPorts). The recipe needs no AMQP port: it
// runs the CLI tools only.
func (c *Cluster) Env(i int) []string {
	m := c.members[i]
	ipTuple := "{" + strings.ReplaceAll(m.ip, ".", ",") + "}"
	return append(c.commonEnv(m),
		"RABBITMQ_CTL_DIST_PORT_MIN="+fmt.Sprint(c.ctlDistMin),
		"RABBITMQ_CTL_DIST_PORT_MAX="+fmt.Sprint(c.ctlDistMin+CtlDistPorts-1),
		"RABBITMQ_CTL_ERL_ARGS=+sbwt none +sbwtdcpu none +sbwtdio none -kernel inet_dist_use_interface "+ipTuple,
		"POD_IP="+m.ip,
	)
}

func (c *Cluster) serverEnv(m *member) []string {
	ipTuple := "{" + strings.ReplaceAll(m.ip, ".", ",") + "}"
	return append(c.commonEnv(m),
		"RABBITMQ_NODE_IP_ADDRESS="+m.ip,
		"RABBITMQ_NODE_PORT="+fmt.Sprint(c.cfg.AMQPPort),
		"RABBITMQ_DIST_PORT="+fmt.Sprint(m.distPort),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(m.dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(m.dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(m.dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(m.dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(m.dir, "advanced.config"),
		"RABBITMQ_PID_FILE="+filepath.Join(m.dir, "rabbitmq.pid"),
		// Unbound schedulers: bound ones (the default) would put every
		// node's one scheduler on the same CPU.
		"RABBITMQ_SCHEDULER_BIND_TYPE=u",
		"RUNNING_UNDER_SYSTEMD=true", // exec the VM (see StartMember)
		"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+ErlArgs+" -kernel inet_dist_use_interface "+ipTuple,
	)
}

// StartMember starts member i (again, with its data, after StopMember or
// KillMember) and returns once it says it started (its boot completed, in a
// cluster: joined), or an error if it exited or ctx or the start timeout
// ended first. Starting a running member is an error.
func (c *Cluster) StartMember(ctx context.Context, i int) error {
	c.mu.Lock()
	m := c.members[i]
	if m.cmd != nil {
		c.mu.Unlock()
		return fmt.Errorf("starting %s: it is running", m.name)
	}
	m.starts++
	logPath := filepath.Join(m.dir, fmt.Sprintf("stdout-%d.log", m.starts))
	out, err := os.Create(logPath)
	if err != nil {
		c.mu.Unlock()
		return err
	}
	cmd := exec.Command(filepath.Join(BinDir, "rabbitmq-server"))
	cmd.Env = c.serverEnv(m)
	cmd.Dir = m.dir
	cmd.Stdout, cmd.Stderr = out, out
	// The node dies with the test process, even one killed at a timeout
	// that runs no clean-up: the kernel kills it (Pdeathsig). That needs
	// the Erlang VM to be this process, so rabbitmq-server execs it, as it
	// does under systemd, instead of running it as a child of its shell;
	// the VM itself stops cleanly on SIGTERM.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.mu.Unlock()
		out.Close()
		return fmt.Errorf("starting %s: %w", m.name, err)
	}
	done := make(chan struct{})
	m.cmd, m.done = cmd, done
	go func() {
		_ = cmd.Wait()
		out.Close()
		c.mu.Lock()
		if m.cmd == cmd {
			m.cmd, m.done = nil, nil
		}
		c.mu.Unlock()
		close(done)
	}()
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("Starting broker... completed")) {
			return nil
		}
		select {
		case <-done:
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("starting %s: it exited: %s", m.name, lastLines(b, 5))
		case <-ctx.Done():
			return fmt.Errorf("starting %s: %w", m.name, ctx.Err())
		case <-tick.C:
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StopMember stops member i as Kubernetes would (SIGTERM, a clean shutdown)
// and waits until it exited, killing it if it has not after 60 s. Stopping a
// stopped member does nothing.
func (c *Cluster) StopMember(i int) error { return c.stop(i, syscall.SIGTERM, 60*time.Second) }

// KillMember kills member i (SIGKILL to its process group) and waits until
// it exited.
func (c *Cluster) KillMember(i int) error { return c.stop(i, syscall.SIGKILL, 0) }

func (c *Cluster) stop(i int, sig syscall.Signal, grace time.Duration) error {
	c.mu.Lock()
	m := c.members[i]
	cmd, done := m.cmd, m.done
	c.mu.Unlock()
	if cmd == nil {
		return nil
	}
	return stopGroup(cmd, done, sig, grace)
}

// stopGroup signals cmd's process group and waits for cmd to exit; after
// grace it kills the group.
func stopGroup(cmd *exec.Cmd, done <-chan struct{}, sig syscall.Signal, grace time.Duration) error {
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
	} else {
		<-done
	}
	// Whatever the node left in its group (erl_child_setup, inet_gethost).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// Running reports whether member i's process runs.
func (c *Cluster) Running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].cmd != nil
}

// Stop stops every member (SIGTERM, then SIGKILL after 30 s) and the
// cluster's epmd, and frees the CLI tools' ports. It may be called more
// than once.
func (c *Cluster) Stop() error {
	var wg sync.WaitGroup
	for i := range c.members {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.stop(i, syscall.SIGTERM, 30*time.Second) }()
	}
	wg.Wait()
	if c.epmd != nil {
		_ = stopGroup(c.epmd, c.epmdDone, syscall.SIGKILL, 0)
	}
	c.mu.Lock()
	hold := c.ctlDistHold
	c.ctlDistHold = nil
	c.mu.Unlock()
	for _, l := range hold {
		l.Close()
	}
	return nil
}

// CLI runs one RabbitMQ CLI tool (rabbitmqctl, rabbitmq-diagnostics,
// rabbitmq-queues, rabbitmq-upgrade) as the sidecar beside member i would
// (Env(i)), and returns its standard output. Each call starts an Erlang VM:
// about a second of CPU.
func (c *Cluster) CLI(ctx context.Context, i int, tool string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir, tool), args...)
	cmd.Env = c.Env(i)
	cmd.Dir = c.members[i].dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("%s %s beside %s: %w: %s", tool, strings.Join(args, " "), c.members[i].name, err,
			lastLines(append(stdout.Bytes(), stderr.Bytes()...), 3))
	}
	return stdout.Bytes(), nil
}

// running is the index of a running member.
func (c *Cluster) running() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.cmd != nil {
			return i, nil
		}
	}
	return 0, errors.New("rabbitmq: no member runs")
}

func (c *Cluster) awaitClustered(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	for {
		nodes, err := c.Nodes(ctx)
		if err == nil && len(nodes.Running) == len(c.members) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d running members (last: %+v, %v): %w", len(c.members), nodes, err, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// Nodes is the cluster's own view of its nodes (rabbitmq-diagnostics
// cluster_status).
type Nodes struct {
	// Running are the running nodes' names.
	Running []string
	// Maintenance are the nodes under maintenance (drained).
	Maintenance []string
}

// InMaintenance reports whether node is under maintenance.
func (n Nodes) InMaintenance(node string) bool { return contains(n.Maintenance, node) }

// Nodes asks a running member for the cluster's view of its nodes.
func (c *Cluster) Nodes(ctx context.Context) (Nodes, error) {
	i, err := c.running()
	if err != nil {
		return Nodes{}, err
	}
	out, err := c.CLI(ctx, i, "rabbitmq-diagnostics", "-q", "cluster_status", "--formatter", "json")
	if err != nil {
		return Nodes{}, err
	}
	var status struct {
		RunningNodes      []string          `json:"running_nodes"`
		MaintenanceStatus map[string]string `json:"maintenance_status"`
	}
	if err := json.Unmarshal(out, &status); err != nil {
		return Nodes{}, fmt.Errorf("reading cluster_status: %w", err)
	}
	n := Nodes{Running: status.RunningNodes}
	for node, s := range status.MaintenanceStatus {
		if s != "not under maintenance" {
			n.Maintenance = append(n.Maintenance, node)
		}
	}
	return n, nil
}

// Queue is the cluster's view of one quorum queue.
type Queue struct {
	Name   string
	Leader string
	// Members are the nodes holding a replica; Online those of them whose
	// replica runs.
	Members, Online []string
}

// Queues is the cluster's view of the quorum queues of the default virtual
// host.
type Queues []Queue

// LedBy are the queues node leads.
func (qs Queues) LedBy(node string) []string {
	var names []string
	for _, q := range qs {
		if q.Leader == node {
			names = append(names, q.Name)
		}
	}
	return names
}

// WithMember are the queues node is a member of.
func (qs Queues) WithMember(node string) []string {
	var names []string
	for _, q := range qs {
		if contains(q.Members, node) {
			names = append(names, q.Name)
		}
	}
	return names
}

// Queues asks a running member for the quorum queues of the default virtual
// host (rabbitmqctl list_queues).
func (c *Cluster) Queues(ctx context.Context) (Queues, error) {
	i, err := c.running()
	if err != nil {
		return nil, err
	}
	out, err := c.CLI(ctx, i, "rabbitmqctl", "-q", "list_queues", "--formatter", "json", "type", "name", "leader", "members", "online")
	if err != nil {
		return nil, err
	}
	var rows []struct {
		Type, Name, Leader string
		Members, Online    []string
	}
	if err := json.Unmarshal(out, &rows); err != nil {
		return nil, fmt.Errorf("reading list_queues: %w: %s", err, out)
	}
	var qs Queues
	for _, r := range rows {
		if r.Type == "quorum" {
			qs = append(qs, Queue{Name: r.Name, Leader: r.Leader, Members: r.Members, Online: r.Online})
		}
	}
	return qs, nil
}

// DeclareQuorumQueue declares a durable quorum queue through member i, which
// therefore leads it at first. Declaring it again does nothing.
func (c *Cluster) DeclareQuorumQueue(i int, name string) error {
	conn, err := amqp.Dial(c.URL(i))
	if err != nil {
		return fmt.Errorf("declaring %s through %s: %w", name, c.members[i].name, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("declaring %s through %s: %w", name, c.members[i].name, err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declaring %s through %s: %w", name, c.members[i].name, err)
	}
	return nil
}

// AcceptsClients reports whether member i takes a new AMQP connection (a
// node under maintenance does not).
func (c *Cluster) AcceptsClients(i int) bool {
	conn, err := amqp.DialConfig(c.URL(i), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
