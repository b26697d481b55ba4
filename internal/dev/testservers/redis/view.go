package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
)

// View is the system's own view at one moment: what each server says of
// itself and what each sentinel says the primary is.
type View struct {
	Servers   []ServerState
	Sentinels []SentinelState
}

// ServerState is one server's INFO replication.
type ServerState struct {
	Addr string
	// Err is set when the server did not answer; the rest is then empty.
	Err error
	// Role is "master" or "slave".
	Role string
	// Offset is its replication offset (master_repl_offset).
	Offset int64
	// Primary is, for a replica, the primary it follows and LinkUp whether
	// its link to it is up.
	Primary string
	LinkUp  bool
	// Replicas are, for a primary, its connected replicas as it sees them.
	Replicas []ReplicaState
}

// ReplicaState is one connected replica as its primary reports it.
type ReplicaState struct {
	Addr string
	// State is "online" once in sync, or a sync phase such as
	// "wait_bgsave".
	State string
	// Offset is the last offset the replica acknowledged.
	Offset int64
}

// SentinelState is what one sentinel says.
type SentinelState struct {
	Addr string
	// Err is set when the sentinel did not answer.
	Err error
	// Primary is the host:port it names for the master name.
	Primary string
	// Flags are its flags for the primary (master, s_down, o_down,
	// failover_in_progress, ...).
	Flags string
	// Replicas and Sentinels count the replicas and other sentinels it
	// knows.
	Replicas, Sentinels int
}

// FailoverInProgress says whether the sentinel runs a failover.
func (s SentinelState) FailoverInProgress() bool {
	return strings.Contains(s.Flags, "failover_in_progress")
}

// View asks every server and sentinel, in parallel, with a 1 s timeout each.
func (c *Cluster) View(ctx context.Context) View {
	v := View{Servers: make([]ServerState, len(c.members)), Sentinels: make([]SentinelState, len(c.members))}
	var wg sync.WaitGroup
	for i, m := range c.members {
		wg.Add(2)
		go func() { defer wg.Done(); v.Servers[i] = c.server(ctx, m.Server.Addr) }()
		go func() { defer wg.Done(); v.Sentinels[i] = c.sentinel(ctx, m.Sentinel.Addr) }()
	}
	wg.Wait()
	return v
}

func (c *Cluster) server(ctx context.Context, addr string) ServerState {
	s := ServerState{Addr: addr}
	info, err := c.client(addr).Info(ctx, "replication").Result()
	if err != nil {
		s.Err = err
		return s
	}
	kv := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, val, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			kv[k] = val
		}
	}
	s.Role = kv["role"]
	s.Offset, _ = strconv.ParseInt(kv["master_repl_offset"], 10, 64)
	if s.Role == "slave" {
		s.Primary = kv["master_host"] + ":" + kv["master_port"]
		s.LinkUp = kv["master_link_status"] == "up"
	}
	for k, val := range kv {
		if !strings.HasPrefix(k, "slave") || strings.HasPrefix(k, "slave_") {
			continue
		}
		// slave0:ip=...,port=...,state=online,offset=...,lag=...
		f := map[string]string{}
		for _, part := range strings.Split(val, ",") {
			if a, b, ok := strings.Cut(part, "="); ok {
				f[a] = b
			}
		}
		off, _ := strconv.ParseInt(f["offset"], 10, 64)
		s.Replicas = append(s.Replicas, ReplicaState{Addr: f["ip"] + ":" + f["port"], State: f["state"], Offset: off})
	}
	return s
}

func (c *Cluster) sentinel(ctx context.Context, addr string) SentinelState {
	s := SentinelState{Addr: addr}
	m, err := c.client(addr).Do(ctx, "SENTINEL", "MASTER", c.cfg.MasterName).Slice()
	if err != nil {
		s.Err = err
		return s
	}
	kv := map[string]string{}
	for i := 0; i+1 < len(m); i += 2 {
		kv[fmt.Sprint(m[i])] = fmt.Sprint(m[i+1])
	}
	s.Flags = kv["flags"]
	s.Replicas, _ = strconv.Atoi(kv["num-slaves"])
	s.Sentinels, _ = strconv.Atoi(kv["num-other-sentinels"])
	// The address clients are sent to (the promoted replica's once a
	// failover has promoted it), not SENTINEL MASTER's.
	a, err := c.client(addr).Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", c.cfg.MasterName).StringSlice()
	if err != nil || len(a) != 2 {
		s.Err = fmt.Errorf("get-master-addr-by-name: %v %w", a, err)
		return s
	}
	s.Primary = a[0] + ":" + a[1]
	return s
}

// AgreedPrimary is the primary every sentinel that answered names, when a
// majority of them answered, none runs a failover, and they agree.
func (v View) AgreedPrimary() (string, error) {
	answered, primary, why := 0, "", ""
	for _, s := range v.Sentinels {
		if s.Err != nil {
			why = fmt.Sprintf(" (%s: %v)", s.Addr, s.Err)
			continue
		}
		if s.FailoverInProgress() {
			return "", fmt.Errorf("sentinel %s runs a failover", s.Addr)
		}
		if primary != "" && s.Primary != primary {
			return "", fmt.Errorf("sentinels disagree: %s and %s", primary, s.Primary)
		}
		answered, primary = answered+1, s.Primary
	}
	if answered*2 <= len(v.Sentinels) {
		return "", fmt.Errorf("only %d of %d sentinels answered%s", answered, len(v.Sentinels), why)
	}
	return primary, nil
}

// Server is the state of the server at addr, if the view has it.
func (v View) Server(addr string) (ServerState, bool) {
	for _, s := range v.Servers {
		if s.Addr == addr {
			return s, true
		}
	}
	return ServerState{}, false
}

// PrimaryIndex is the index of the member the sentinels agree is the
// primary, or -1 with the reason.
func (v View) PrimaryIndex() (int, error) {
	p, err := v.AgreedPrimary()
	if err != nil {
		return -1, err
	}
	for i, s := range v.Servers {
		if s.Addr == p {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the sentinels name %s, not a member", p)
}

// settled checks that the sentinels agree on a primary that says it is one,
// with replicas servers online, and that every sentinel
// knows replicas replicas and sentinels-1 other sentinels (sentinels 0: none
// is asked, only the servers).
func (v View) settled(replicas, sentinels int) error {
	primary := ""
	if sentinels == 0 {
		for _, s := range v.Servers {
			if s.Role == "master" {
				primary = s.Addr
			}
		}
	} else {
		p, err := v.AgreedPrimary()
		if err != nil {
			return err
		}
		primary = p
		for _, s := range v.Sentinels {
			if s.Err != nil || s.Replicas != replicas || s.Sentinels != sentinels-1 {
				return fmt.Errorf("sentinel %s knows %d replicas and %d sentinels (%v)", s.Addr, s.Replicas, s.Sentinels, s.Err)
			}
		}
	}
	ps, ok := v.Server(primary)
	if !ok || ps.Role != "master" {
		return fmt.Errorf("no server is the primary %q yet", primary)
	}
	online := 0
	for _, r := range ps.Replicas {
		if r.State == "online" {
			online++
		}
	}
	if online < replicas {
		return fmt.Errorf("primary %s has %d of %d replicas online: %+v", primary, online, replicas, ps.Replicas)
	}
	return nil
}
