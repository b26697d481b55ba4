// Package patroni runs a real PostgreSQL cluster under Patroni on this
// machine: an etcd as the DCS and one Patroni process per member, each
// managing its own PostgreSQL 15 on that member's loopback IP, the way a pod
// would run it. test/stateful uses it to prove the recipe in
// examples/postgresql-patroni (docs/recipes/postgresql-patroni.md) on the
// dev cluster, with vacate-hook and the controller, under a client load.
//
// It needs the Debian packages postgresql (15) and patroni (3.0.2) (make
// stateful-servers installs them) and the dev cluster's etcd binary
// (devcluster.EnsureBinaries). PostgreSQL refuses to run as root, so when the
// test runs as root every member runs as the user postgres.
//
// A test starts a cluster on the pods' IPs, runs a recipe beside a member
// and judges what clients saw:
//
//	c, err := patroni.Start(ctx, patroni.Options{Dir: t.TempDir(), DCSIP: dcsIP, MemberIPs: podIPs})
//	if err != nil { // Start has stopped what it started
//		t.Fatal(err)
//	}
//	t.Cleanup(c.Stop)
//	load, err := c.StartLoad(ctx, 0)     // commits through whichever member is the primary
//	env := c.SidecarEnv(i)               // POD_NAME, PATRONI_URL, ... for a sidecar beside member i
//	v, err := c.View(ctx)                // who leads; each member's role, state and lag
//	report, err := load.Stop(ctx)        // a testservers.Report: lost, duplicated, longest outage
package patroni

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// Where Debian's packages put the servers.
const (
	patroniBin  = "/usr/bin/patroni"
	postgresBin = "/usr/lib/postgresql/15/bin"
)

// Credentials every member is given. The cluster is a throwaway on loopback.
const (
	// Superuser and SuperuserPassword are what the load client and
	// checks connect as.
	Superuser         = "postgres"
	SuperuserPassword = "vacate-superuser"
	replicationUser   = "replicator"
	replicationPass   = "vacate-replication"
)

// Options says where and how to run a cluster.
type Options struct {
	// Dir holds every member's files (a t.TempDir()). When the test runs
	// as root, Dir and the directories above it up to the system's temp
	// directory are made traversable (o+x) so that the postgres user
	// reaches its own subdirectories.
	Dir string
	// DCSIP is the loopback IP the etcd listens on (on DCSPort and
	// DCSPeerPort).
	DCSIP netip.Addr
	// MemberIPs holds one loopback IP per member (the pods' IPs); member i
	// is named Name(i) and listens on MemberIPs[i] (PostgreSQL on
	// PostgresPort, Patroni's REST API on RESTPort).
	MemberIPs []netip.Addr
	// PostgresPort and RESTPort are every member's PostgreSQL and Patroni
	// REST API ports, on its own IP, as in a pod; DCSPort and DCSPeerPort
	// are etcd's client and peer ports. Each that is 0 is a port Start
	// finds free on every address (not 5432, 8008, 2379 or 2380), so that
	// two clusters on one machine never collide, even on the same IPs.
	PostgresPort, RESTPort, DCSPort, DCSPeerPort int
	// Scope is the Patroni cluster's name (default "vacate").
	Scope string
	// LoopWait, TTL and RetryTimeout are Patroni's loop_wait, ttl and
	// retry_timeout (defaults 1 s, 20 s, 5 s: faster than Patroni's own
	// defaults, so a switchover takes seconds).
	LoopWait, TTL, RetryTimeout time.Duration
	// Log receives the harness's progress lines (nil: none). Each
	// process's own output goes to a file under Dir (see Cluster.Logs).
	Log io.Writer
}

func (o *Options) defaults() error {
	if o.Dir == "" {
		return errors.New("patroni: Options.Dir is required")
	}
	if !o.DCSIP.IsValid() || !o.DCSIP.IsLoopback() {
		return fmt.Errorf("patroni: DCSIP %v is not a loopback address", o.DCSIP)
	}
	if len(o.MemberIPs) == 0 {
		return errors.New("patroni: Options.MemberIPs is empty")
	}
	for _, ip := range o.MemberIPs {
		if !ip.IsLoopback() || !ip.Is4() || ip == o.DCSIP {
			return fmt.Errorf("patroni: member IP %v is not an IPv4 loopback address of its own", ip)
		}
	}
	if o.Scope == "" {
		o.Scope = "vacate"
	}
	if o.LoopWait == 0 {
		o.LoopWait = time.Second
	}
	if o.TTL == 0 {
		o.TTL = 20 * time.Second
	}
	if o.RetryTimeout == 0 {
		o.RetryTimeout = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	for _, port := range []*int{&o.PostgresPort, &o.RESTPort, &o.DCSPort, &o.DCSPeerPort} {
		if *port < 0 || *port > 65535 {
			return fmt.Errorf("patroni: port %d is not a TCP port (1 to 65535, or 0 for a free one)", *port)
		}
		if *port != 0 {
			continue
		}
		l, err := net.Listen("tcp4", "0.0.0.0:0")
		if err != nil {
			return fmt.Errorf("patroni: finding a free port: %w", err)
		}
		// Held until every port is chosen, so that they differ.
		defer l.Close()
		*port = l.Addr().(*net.TCPAddr).Port
	}
	return nil
}

// Cluster is a running DCS and its members. Its methods are safe for
// concurrent use.
type Cluster struct {
	opts    Options
	cred    *syscall.Credential
	etcd    *process
	members []*member
	http    *http.Client
	stopped sync.Once
}

type member struct {
	mu   sync.Mutex
	name string
	ip   netip.Addr
	dir  string
	proc *process // nil while stopped
}

// Name is the name of member i: its Patroni name, and the pod's name a
// sidecar beside it sees as POD_NAME.
func Name(i int) string { return "pg-" + strconv.Itoa(i) }

// Start starts the DCS and every member, and returns once one member is the
// leader and accepts writes and every other member streams from it. On error
// everything it started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	c := &Cluster{opts: opts, http: &http.Client{Timeout: 3 * time.Second}}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := c.prepare(); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	for i, ip := range opts.MemberIPs {
		m := &member{name: Name(i), ip: ip, dir: filepath.Join(opts.Dir, Name(i))}
		c.members = append(c.members, m)
		if err := c.writeConfig(m); err != nil {
			return nil, err
		}
	}
	// The first member bootstraps alone, so it is the first leader; the
	// others then clone it.
	if err := c.StartMember(0); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := c.WaitLeader(ctx, ""); err != nil {
		return nil, fmt.Errorf("waiting for %s to bootstrap: %w", Name(0), err)
	}
	fmt.Fprintf(c.opts.Log, "%s bootstrapped and leads after %s\n", Name(0), time.Since(start).Round(time.Millisecond))
	for i := 1; i < len(c.members); i++ {
		if err := c.StartMember(i); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(c.opts.Log, "every member streams after %s\n", time.Since(start).Round(time.Millisecond))
	return c, nil
}

// prepare finds the postgres user (when running as root) and makes Dir
// reachable by it.
func (c *Cluster) prepare() error {
	if err := os.MkdirAll(c.opts.Dir, 0o755); err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("finding the postgres user (is the postgresql package installed?): %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Clean(c.opts.Dir); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		st, err := os.Stat(d)
		if err != nil {
			return err
		}
		if err := os.Chmod(d, st.Mode().Perm()|0o011); err != nil {
			return err
		}
	}
	return nil
}

// mkdirOwned creates dir owned by the user the servers run as.
func (c *Cluster) mkdirOwned(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if c.cred != nil {
		return os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid))
	}
	return nil
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	bins, err := devcluster.EnsureBinaries(ctx, c.opts.Log)
	if err != nil {
		return fmt.Errorf("finding etcd: %w", err)
	}
	dir := filepath.Join(c.opts.Dir, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	client := c.DCSURL()
	peer := "http://" + netip.AddrPortFrom(c.opts.DCSIP, uint16(c.opts.DCSPeerPort)).String()
	p, err := startProcess(bins[devcluster.Etcd], []string{
		"--name=dcs",
		"--data-dir=" + filepath.Join(dir, "data"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=dcs=" + peer,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}, nil, nil, filepath.Join(dir, "etcd.log"))
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	c.etcd = p
	err = poll(ctx, 30*time.Second, func() (bool, string) {
		if p.exited() {
			return false, "etcd exited: " + p.logTail()
		}
		body, err := c.get(ctx, client+"/health")
		return err == nil && strings.Contains(body, `"health":"true"`), fmt.Sprint("etcd not healthy: ", err, body)
	})
	if err != nil {
		return fmt.Errorf("starting etcd: %w", err)
	}
	fmt.Fprintf(c.opts.Log, "etcd ready on %s\n", client)
	return nil
}

// Len is the number of members.
func (c *Cluster) Len() int { return len(c.members) }

// IP is member i's IP (its pod's IP).
func (c *Cluster) IP(i int) netip.Addr { return c.members[i].ip }

// Index is the index of the member named name, or -1.
func (c *Cluster) Index(name string) int {
	return slices.IndexFunc(c.members, func(m *member) bool { return m.name == name })
}

// RESTURL is the base URL of member i's Patroni REST API.
func (c *Cluster) RESTURL(i int) string {
	return "http://" + netip.AddrPortFrom(c.members[i].ip, uint16(c.opts.RESTPort)).String()
}

// DCSURL is the base URL of the DCS's etcd client API (its v3 JSON
// gateway answers under /v3/).
func (c *Cluster) DCSURL() string {
	return "http://" + netip.AddrPortFrom(c.opts.DCSIP, uint16(c.opts.DCSPort)).String()
}

// SidecarEnv is what a sidecar beside member i adds to its own environment
// to reach that member, as the recipe's manifest sets it: POD_NAME and
// POD_IP (the downward API), PATRONI_NAME (the member's Patroni name, as
// Spilo and Crunchy's images set it) and PATRONI_URL (its REST API; in a pod
// it is http://127.0.0.1:8008, which the recipe's script defaults to).
func (c *Cluster) SidecarEnv(i int) []string {
	m := c.members[i]
	return []string{
		"POD_NAME=" + m.name,
		"POD_IP=" + m.ip.String(),
		"PATRONI_NAME=" + m.name,
		"PATRONI_URL=" + c.RESTURL(i),
	}
}

// DSN is a connection string for the superuser over every member, that
// picks whichever accepts writes (target_session_attrs=read-write).
func (c *Cluster) DSN() string {
	hosts := make([]string, len(c.members))
	for i, m := range c.members {
		hosts[i] = netip.AddrPortFrom(m.ip, uint16(c.opts.PostgresPort)).String()
	}
	return fmt.Sprintf("postgres://%s:%s@%s/postgres?target_session_attrs=read-write&connect_timeout=2&sslmode=disable",
		Superuser, SuperuserPassword, strings.Join(hosts, ","))
}

// MemberDSN is a connection string for the superuser to member i alone.
func (c *Cluster) MemberDSN(i int) string {
	return fmt.Sprintf("postgres://%s:%s@%s/postgres?connect_timeout=2&sslmode=disable",
		Superuser, SuperuserPassword, netip.AddrPortFrom(c.members[i].ip, uint16(c.opts.PostgresPort)))
}

// Logs are the tails of every process's output, for a failed test.
func (c *Cluster) Logs() string {
	var b strings.Builder
	if c.etcd != nil {
		fmt.Fprintf(&b, "--- etcd\n%s\n", c.etcd.logTail())
	}
	for _, m := range c.members {
		m.mu.Lock()
		p := m.proc
		m.mu.Unlock()
		if p != nil {
			fmt.Fprintf(&b, "--- %s\n%s\n", m.name, p.logTail())
		} else if data, err := os.ReadFile(filepath.Join(m.dir, "patroni.log")); err == nil {
			fmt.Fprintf(&b, "--- %s (stopped)\n%s\n", m.name, tail(data, 4000))
		}
	}
	return b.String()
}

// Stop stops every member and the DCS, and waits for their processes
// (PostgreSQL's too) to be gone. It is safe to call more than once.
func (c *Cluster) Stop() {
	c.stopped.Do(func() {
		var wg sync.WaitGroup
		for i := range c.members {
			wg.Add(1)
			go func() { defer wg.Done(); c.StopMember(i, 10*time.Second) }()
		}
		wg.Wait()
		if c.etcd != nil {
			c.etcd.stop(5 * time.Second)
		}
	})
}
