package patroni

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file reads the cluster as Patroni reports it (its REST API) and
// waits on what it says: who leads, who streams.

// View is the cluster as Patroni reports it (GET /cluster).
type View struct {
	// Leader names the member holding the leader lock ("" when none).
	Leader string
	// Members lists every member registered in the DCS, by name.
	Members []MemberView
	// From is the member whose REST API answered.
	From string
}

// MemberView is one member in a View.
type MemberView struct {
	Name string `json:"name"`
	// Role is leader, replica or sync_standby.
	Role string `json:"role"`
	// State is Patroni's state of its PostgreSQL: running, streaming,
	// starting, stopped, ...
	State    string `json:"state"`
	APIURL   string `json:"api_url"`
	Host     string `json:"host"`
	Timeline int    `json:"timeline"`
	// Lag is the replica's lag behind the leader in bytes (-1: unknown,
	// 0 for the leader).
	Lag int64 `json:"-"`
	// RawLag is Patroni's lag field: a number of bytes or "unknown".
	RawLag json.RawMessage `json:"lag"`
}

// Member finds the member named name.
func (v View) Member(name string) (MemberView, bool) {
	i := slices.IndexFunc(v.Members, func(m MemberView) bool { return m.Name == name })
	if i < 0 {
		return MemberView{}, false
	}
	return v.Members[i], true
}

func (v View) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leader %q:", v.Leader)
	for _, m := range v.Members {
		fmt.Fprintf(&b, " %s(%s,%s,tl %d,lag %d)", m.Name, m.Role, m.State, m.Timeline, m.Lag)
	}
	return b.String()
}

// View asks the members' REST APIs, in order, for the cluster (GET
// /cluster), and returns the first answer.
func (c *Cluster) View(ctx context.Context) (View, error) {
	var errs []error
	for i, m := range c.members {
		body, err := c.get(ctx, c.RESTURL(i)+"/cluster")
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var raw struct {
			Members []MemberView `json:"members"`
		}
		if err := json.Unmarshal([]byte(body), &raw); err != nil {
			errs = append(errs, fmt.Errorf("%s: decoding /cluster: %w", m.name, err))
			continue
		}
		v := View{From: m.name, Members: raw.Members}
		for j := range v.Members {
			mv := &v.Members[j]
			if mv.Role == "leader" {
				v.Leader = mv.Name
			}
			if n, err := strconv.ParseInt(string(mv.RawLag), 10, 64); err == nil {
				mv.Lag = n
			} else if len(mv.RawLag) > 0 {
				mv.Lag = -1
			}
		}
		return v, nil
	}
	return View{}, fmt.Errorf("no member's REST API answered: %w", errors.Join(errs...))
}

// AcceptsWrites says whether member i's Patroni reports it as the primary
// holding the leader lock with PostgreSQL out of recovery (GET /primary
// answering 200 with role master).
func (c *Cluster) AcceptsWrites(ctx context.Context, i int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RESTURL(i)+"/primary", nil)
	if err != nil {
		return false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var st struct {
		Role  string `json:"role"`
		State string `json:"state"`
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return false
	}
	return (st.Role == "master" || st.Role == "primary") && st.State == "running"
}

// WaitLeader waits until a member other than not (a name, or "") is the
// leader and accepts writes, and returns its index.
func (c *Cluster) WaitLeader(ctx context.Context, not string) (int, error) {
	leader := -1
	err := poll(ctx, 90*time.Second, func() (bool, string) {
		v, err := c.View(ctx)
		if err != nil {
			return false, err.Error()
		}
		if v.Leader == "" || v.Leader == not {
			return false, v.String()
		}
		leader = c.Index(v.Leader)
		return leader >= 0 && c.AcceptsWrites(ctx, leader), v.String()
	})
	return leader, err
}

// WaitHealthy waits until one member leads and accepts writes and every
// running member is registered and streams from it with a known lag.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, 120*time.Second, func() (bool, string) {
		v, err := c.View(ctx)
		if err != nil {
			return false, err.Error()
		}
		leader := c.Index(v.Leader)
		if leader < 0 || !c.AcceptsWrites(ctx, leader) {
			return false, "no writable leader: " + v.String()
		}
		for i, m := range c.members {
			if !c.Running(i) || m.name == v.Leader {
				continue
			}
			mv, ok := v.Member(m.name)
			if !ok || (mv.State != "running" && mv.State != "streaming") || mv.Lag < 0 || !c.replicaStreams(ctx, i) {
				return false, "replica " + m.name + " not streaming: " + v.String()
			}
		}
		return true, v.String()
	})
}

// replicaStreams says whether member i's Patroni reports a running replica
// that receives WAL (GET /replica answering 200).
func (c *Cluster) replicaStreams(ctx context.Context, i int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.RESTURL(i)+"/replica", nil)
	if err != nil {
		return false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *Cluster) get(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), nil
}

// poll calls cond until it says true, ctx ends or timeout passes; the error
// carries cond's last word.
func poll(ctx context.Context, timeout time.Duration, cond func() (bool, string)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s", ctx.Err(), why)
		case <-t.C:
		}
	}
}
