// Package redis runs Redis with Sentinel as local processes, as a Kubernetes
// StatefulSet runs it: member i is one pod with its own loopback IP, holding a
// redis-server and a redis-sentinel, both announcing that IP. Every member
// uses the same two ports, as pods do; Start picks them free (not Redis's
// 6379 and 26379), so that two clusters on one machine never collide, even
// on the same IPs. Member 0 starts as the primary, the others as its replicas, and the
// sentinels monitor it under one name. The tests of the recipe in
// examples/redis-sentinel (docs/recipes/redis-sentinel.md) use it, and so can
// a dev-cluster test or a benchmark that passes its simulated pods' IPs.
//
//	c, err := redis.Start(ctx, redis.Config{IPs: ips, Dir: t.TempDir()})
//	defer c.Stop()
//	load := c.StartLoad(ctx, redis.LoadOptions{})
//	env := c.SidecarEnv(0) // what vacate-hook beside member 0 needs
//	v := c.View(ctx)       // each server's role and offset, each sentinel's primary
//	report, err := load.Stop(ctx)
package redis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/vacate-dev/vacate/internal/dev/testservers"
)

// Config describes a cluster to start.
type Config struct {
	// IPs are the members' addresses, one per member (at least 2); each
	// binds only its own. Loopback addresses need no setup on Linux.
	IPs []string
	// Dir holds every member's configuration, data and logs.
	Dir string
	// MasterName is the sentinels' name for the primary (default mymaster).
	MasterName string
	// Password, when set, is required by the servers and the sentinels
	// (requirepass), used between them (masterauth, auth-pass,
	// sentinel-pass) and given to the recipe as REDISCLI_AUTH.
	Password string
	// DownAfter is the sentinels' down-after-milliseconds (default 5 s);
	// FailoverTimeout their failover-timeout (default 30 s). Quorum is a
	// majority of the members.
	DownAfter, FailoverTimeout time.Duration
	// ServerPort and SentinelPort are the ports every member's server and
	// sentinel listen on, on the member's IP (0: a port Start finds free
	// on every address).
	ServerPort, SentinelPort int
}

// Cluster is a running Redis with Sentinel. Its methods are safe for
// concurrent use.
type Cluster struct {
	cfg     Config
	members []*Member

	mu      sync.Mutex
	clients map[string]*goredis.Client
	loads   []*Load
}

// Member is one simulated pod: its server and its sentinel.
type Member struct {
	IP       string
	Server   *Process
	Sentinel *Process
}

// Start writes the configurations, starts every server and sentinel, and
// returns once the sentinels know every replica and each other. On error
// whatever started is stopped again.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if len(cfg.IPs) < 2 {
		return nil, fmt.Errorf("redis with sentinel needs at least 2 members, got %d", len(cfg.IPs))
	}
	if cfg.MasterName == "" {
		cfg.MasterName = "mymaster"
	}
	if cfg.DownAfter == 0 {
		cfg.DownAfter = 5 * time.Second
	}
	if cfg.FailoverTimeout == 0 {
		cfg.FailoverTimeout = 30 * time.Second
	}
	for _, port := range []int{cfg.ServerPort, cfg.SentinelPort} {
		if port < 0 || port > 65535 {
			return nil, fmt.Errorf("port %d is not a TCP port (1 to 65535, or 0 for a free one)", port)
		}
	}
	if cfg.ServerPort == 0 || cfg.SentinelPort == 0 {
		ports, err := testservers.FreePorts(2)
		if err != nil {
			return nil, err
		}
		cfg.ServerPort, cfg.SentinelPort = cmp.Or(cfg.ServerPort, ports[0]), cmp.Or(cfg.SentinelPort, ports[1])
	}
	c := &Cluster{cfg: cfg, clients: map[string]*goredis.Client{}}
	for i, ip := range cfg.IPs {
		m, err := c.configure(i, ip)
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, m)
	}
	for _, m := range c.members {
		if err := m.Server.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	// Sentinels start once the primary answers, so their first INFO
	// already lists the replicas.
	if err := c.waitFor(ctx, func(v View) error { return v.settled(len(c.members)-1, 0) }); err != nil {
		c.Stop()
		return nil, fmt.Errorf("waiting for the replicas to sync: %w", err)
	}
	for _, m := range c.members {
		if err := m.Sentinel.Start(); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitSettled(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

func (c *Cluster) configure(i int, ip string) (*Member, error) {
	dir := filepath.Join(c.cfg.Dir, fmt.Sprintf("member-%d", i))
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, fmt.Errorf("creating the directory of member %d: %w", i, err)
	}
	pw := c.cfg.Password
	server := []string{
		"bind " + ip,
		fmt.Sprintf("port %d", c.cfg.ServerPort),
		"protected-mode no",
		"daemonize no",
		"dir " + filepath.Join(dir, "data"),
		`save ""`,
		"appendonly no",
		"repl-diskless-sync yes",
		"repl-diskless-sync-delay 0",
		"replica-announce-ip " + ip,
	}
	if pw != "" {
		server = append(server, "requirepass "+pw, "masterauth "+pw)
	}
	if i > 0 {
		server = append(server, fmt.Sprintf("replicaof %s %d", c.cfg.IPs[0], c.cfg.ServerPort))
	}
	name := c.cfg.MasterName
	sentinel := []string{
		"bind " + ip,
		fmt.Sprintf("port %d", c.cfg.SentinelPort),
		"protected-mode no",
		"daemonize no",
		"dir " + dir,
		"sentinel announce-ip " + ip,
		fmt.Sprintf("sentinel announce-port %d", c.cfg.SentinelPort),
		fmt.Sprintf("sentinel monitor %s %s %d %d", name, c.cfg.IPs[0], c.cfg.ServerPort, len(c.cfg.IPs)/2+1),
		fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, c.cfg.DownAfter.Milliseconds()),
		fmt.Sprintf("sentinel failover-timeout %s %d", name, c.cfg.FailoverTimeout.Milliseconds()),
		fmt.Sprintf("sentinel parallel-syncs %s 1", name),
	}
	if pw != "" {
		sentinel = append(sentinel, "requirepass "+pw, "sentinel sentinel-pass "+pw, fmt.Sprintf("sentinel auth-pass %s %s", name, pw))
	}
	// Both rewrite their files: the server on REPLICAOF from a sentinel
	// (CONFIG REWRITE), the sentinel whenever its view changes.
	serverConf, sentinelConf := filepath.Join(dir, "redis.conf"), filepath.Join(dir, "sentinel.conf")
	for path, lines := range map[string][]string{serverConf: server, sentinelConf: sentinel} {
		if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return &Member{
		IP: ip,
		Server: &Process{
			Name: fmt.Sprintf("redis-%d", i), Addr: net.JoinHostPort(ip, strconv.Itoa(c.cfg.ServerPort)),
			bin: "redis-server", args: []string{serverConf}, logPath: filepath.Join(dir, "redis.log"),
		},
		Sentinel: &Process{
			Name: fmt.Sprintf("sentinel-%d", i), Addr: net.JoinHostPort(ip, strconv.Itoa(c.cfg.SentinelPort)),
			bin: "redis-sentinel", args: []string{sentinelConf}, logPath: filepath.Join(dir, "sentinel.log"),
		},
	}, nil
}

// Members are the simulated pods, in the order of Config.IPs.
func (c *Cluster) Members() []*Member { return c.members }

// Member is member i.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// MasterName is the sentinels' name for the primary.
func (c *Cluster) MasterName() string { return c.cfg.MasterName }

// SentinelAddrs are every sentinel's host:port.
func (c *Cluster) SentinelAddrs() []string {
	addrs := make([]string, len(c.members))
	for i, m := range c.members {
		addrs[i] = m.Sentinel.Addr
	}
	return addrs
}

// SidecarEnv is the environment vacate-hook beside member i gives the
// recipe's commands (what manifests.yaml sets on the sidecar), apart from
// vacate-hook's own VACATE_* variables.
func (c *Cluster) SidecarEnv(i int) []string {
	m := c.members[i]
	env := []string{
		"POD_IP=" + m.IP,
		"REDIS_HOST=" + m.IP,
		fmt.Sprintf("REDIS_PORT=%d", c.cfg.ServerPort),
		"SENTINEL_MASTER=" + c.cfg.MasterName,
		"SENTINELS=" + strings.Join(c.SentinelAddrs(), " "),
	}
	if c.cfg.Password != "" {
		env = append(env, "REDISCLI_AUTH="+c.cfg.Password)
	}
	return env
}

// StopMember stops member i's server and sentinel cleanly, as when its pod
// is evicted; StartMember starts them again with their data and the
// configuration they rewrote.
func (c *Cluster) StopMember(i int) error {
	return errors.Join(c.members[i].Sentinel.Stop(), c.members[i].Server.Stop())
}

// KillMember kills member i's server and sentinel (SIGKILL).
func (c *Cluster) KillMember(i int) error {
	return errors.Join(c.members[i].Sentinel.Kill(), c.members[i].Server.Kill())
}

// StartMember starts member i's server and sentinel unless they run.
func (c *Cluster) StartMember(i int) error {
	return errors.Join(c.members[i].Server.Start(), c.members[i].Sentinel.Start())
}

// WaitSettled waits until every member answers, all sentinels name the
// same primary, which has every other member as a replica in sync, and
// every sentinel knows every replica and every other sentinel.
func (c *Cluster) WaitSettled(ctx context.Context) error {
	n := len(c.members)
	if err := c.waitFor(ctx, func(v View) error { return v.settled(n-1, n) }); err != nil {
		return fmt.Errorf("waiting for redis with sentinel to settle: %w", err)
	}
	return nil
}

// waitFor polls the view until check accepts it or ctx ends (then the last
// reason is returned). It waits 30 s at most when ctx has no deadline.
func (c *Cluster) waitFor(ctx context.Context, check func(View) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check(c.View(ctx))
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop stops every load, server and sentinel. It may be called more than
// once.
func (c *Cluster) Stop() {
	c.mu.Lock()
	loads := c.loads
	c.loads = nil
	c.mu.Unlock()
	for _, l := range loads {
		l.halt()
	}
	for _, m := range c.members {
		_ = m.Sentinel.Kill()
		_ = m.Server.Kill()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.clients {
		_ = cl.Close()
	}
	c.clients = map[string]*goredis.Client{}
}

// client is a cached plain connection to one server or sentinel, for the
// view and for tests.
func (c *Cluster) client(addr string) *goredis.Client {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl, ok := c.clients[addr]; ok {
		return cl
	}
	cl := goredis.NewClient(&goredis.Options{
		Addr: addr, Password: c.cfg.Password, Protocol: 2, MaxRetries: -1, PoolSize: 2,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
	c.clients[addr] = cl
	return cl
}

// Client is a plain connection to one address (a member's server or
// sentinel), with the cluster's password; the cluster closes it on Stop.
func (c *Cluster) Client(addr string) *goredis.Client { return c.client(addr) }
