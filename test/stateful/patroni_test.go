package stateful_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers/patroni"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
)

// TestPostgreSQLPatroni drains PostgreSQL under Patroni (a primary and two
// streaming replicas, the real servers, one member per pod) with
// examples/postgresql-patroni under a client load that commits a one-row
// transaction every 10 ms through a multi-host connection string:
//
//  1. a replica's node drains: its hook is Completed at the first status,
//     nothing switches over (the leader and its timeline stay), the pod is
//     evicted and the drain is Drained;
//  2. the primary's node drains while the replica's pod is still gone and
//     the other replica, the only candidate, lags (its WAL receiver frozen
//     while the primary writes about 12 MB): Patroni refuses the
//     switchover, and status.hooks and `vacate explain` name that replica
//     and its lag in bytes, over maximum_lag_on_failover, while the pod
//     stays; thawed, it catches up and the retry switches over, the
//     PodDisruptionBudget then refuses the eviction (the first replica's
//     pod is gone), and the drain, cancelled then, is undone as the
//     recipe's page says: nothing switches back, the old primary rejoins
//     as a replica, its pod stays and its node is schedulable again;
//  3. the new primary's node drains with its Patroni frozen (SIGSTOP): the
//     recipe's evacuate cannot reach it, and the drain's status.hooks and
//     `vacate explain` say so while the pod stays; thawed, Patroni switches
//     over, and only then is the pod evicted (Patroni's own view, sampled
//     throughout);
//  4. every transaction the client saw committed is there, once.
//
// The recipe bounds each of its calls to Patroni (curl --max-time 5, and 45
// for the switchover) below the timeouts vacate-hook gives its commands, so
// a frozen Patroni makes a command fail with "cannot reach Patroni", not
// run past its timeout; vacate-hook's own timeout is proven in
// internal/sidecar.
func TestPostgreSQLPatroni(t *testing.T) {
	a := newApp(t, "patroni")
	ctx := testenv.Context(t)
	dir := t.TempDir()
	var ips []netip.Addr
	for _, ip := range a.IPs() {
		ips = append(ips, netip.MustParseAddr(ip))
	}
	// The leader lock lasts 30 s (Patroni's default), not the harness's
	// 20: the third part freezes the leader's Patroni for a few seconds,
	// which must not cost it the lock.
	dcs := patroniDCSIP(t, a)
	pc, err := patroni.Start(ctx, patroni.Options{Dir: dir, DCSIP: dcs, MemberIPs: ips, TTL: 30 * time.Second, Log: patroniLog{t}})
	if err != nil {
		t.Fatalf("starting PostgreSQL under Patroni: %v", err)
	}
	t.Cleanup(pc.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(pc.Logs())
		}
	})
	sidecars := make([]*sidecarProc, len(a.pods))
	for i := range a.pods {
		sidecars[i] = a.startSidecar(t, i, "postgresql-patroni", pc.SidecarEnv(i))
	}
	// An evicted pod's containers stop: its sidecar, then Patroni and its
	// PostgreSQL.
	a.setOnEvict(func(i int) {
		sidecars[i].stop()
		pc.StopMember(i, 10*time.Second)
	})
	probe := newPatroniProbe(pc)
	t.Cleanup(probe.close)
	view := sampleView(t, 20*time.Millisecond, probe.view)
	load, err := pc.StartLoad(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // on failure; Stop again is cheap with a dead context
		dead, cancel := context.WithCancel(context.Background())
		cancel()
		_, _ = load.Stop(dead)
	})
	if err := load.WaitAcked(ctx, 20); err != nil {
		t.Fatal(err)
	}
	first := patroniMustView(ctx, t, pc)
	primary := pc.Index(first.Leader)
	if primary < 0 {
		t.Fatalf("no leader: %s", first)
	}
	replica, other := (primary+1)%3, (primary+2)%3
	t.Logf("%s leads, on %s (pod %s): %s", first.Leader, a.nodes[primary], a.pods[primary].Name, first)

	t.Log("1. a replica's node drains: Completed at once, nothing switches over")
	from := time.Now()
	replicaFrom := from
	a.drain(t, replica, v1alpha1.ModeMaintenance)
	nd := a.waitDrain(t, replica, "Drained", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	replicaEvicted, ok := a.evictedAt(replica)
	if !ok {
		t.Fatalf("the drain is %s but the replica's pod was not seen evicted", nd.Status.Phase)
	}
	// vacate-hook logs each status answer that differs from the last.
	if log := sidecars[replica].logText(); strings.Count(log, "msg=status") != 1 ||
		!logLine(log, "msg=status", "state=Completed", patroni.Name(replica)+" is not the leader") {
		t.Errorf("the replica's status did not answer Completed at its first run:\n%s", log)
	}
	if leaders := patroniPrimaries(view, from, time.Now()); len(leaders) != 1 || leaders[0] != first.Leader {
		t.Errorf("primaries seen while a replica's node drained: %q, want %s alone; views:%s", leaders, first.Leader, view.changes())
	}
	if v := patroniMustView(ctx, t, pc); v.Leader != first.Leader || patroniTimeline(v, v.Leader) != patroniTimeline(first, first.Leader) {
		t.Errorf("draining a replica switched something: before %s, after %s", first, v)
	}

	t.Log("2. the primary's node drains while the replica's pod is gone and the only healthy replica lags: the drain holds, saying which replica lags and by how much")
	thaw, err := pc.FreezeWALReceiver(other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(thaw)
	lag := patroniWriteWAL(ctx, t, pc, primary, patroni.Name(other))
	from = time.Now()
	a.drain(t, primary, v1alpha1.ModeMaintenance)
	nd = a.waitDrain(t, primary, "status.hooks to say why the switchover was refused", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, _ := podHook(nd, a, primary)
		return strings.Contains(h.Message, "patroni.sh evacuate exited 1")
	})
	h, _ := podHook(nd, a, primary)
	said := a.explainPod(t, nd, primary)
	t.Logf("with %s lagging %d bytes (Patroni's /cluster): status.hooks %s %q; vacate explain: %s", patroni.Name(other), lag, h.Phase, h.Message, said)
	if _, ok := a.evictedAt(primary); ok || h.Phase == hook.Completed {
		t.Fatalf("with the only candidate lagging, the primary's hook is %s and its pod evicted: %v", h.Phase, ok)
	}
	for where, msg := range map[string]string{"status.hooks": h.Message, "vacate explain": said} {
		if said := patroniLagSaid(msg, patroni.Name(other)); said <= patroniMaxLag {
			t.Errorf("%s says %q: want %s named as lagging by more than maximum_lag_on_failover (%d bytes)", where, msg, patroni.Name(other), patroniMaxLag)
		}
	}
	if v := patroniMustView(ctx, t, pc); v.Leader != first.Leader {
		t.Fatalf("the refused switchover moved the leader: %s", v)
	}
	thaw()

	t.Log("2. the replica catches up: the switchover, the PDB refuses the eviction, the drain is cancelled")
	nd = a.waitDrain(t, primary, "the hook Completed and the eviction refused by the PDB", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, _ := podHook(nd, a, primary)
		return h.Phase == hook.Completed && patroniBlockedBy(nd, a, primary, v1alpha1.BlockerPDB)
	})
	switched := patroniMustView(ctx, t, pc)
	if switched.Leader != patroni.Name(other) || !pc.AcceptsWrites(ctx, other) {
		t.Fatalf("the hook said Completed, but Patroni says %s; want %s leading, the only healthy replica", switched, patroni.Name(other))
	}
	if said := a.explainPod(t, nd, primary); !strings.Contains(said, "PDB") {
		t.Errorf("vacate explain says of %s: %q; want the PDB named", a.pods[primary].Name, said)
	}
	a.cancel(t, primary)
	waitUndone(ctx, t, a, primary)
	testutil.Eventually(t, 2*time.Minute, "vacate-hook to forget the cancelled drain", func() error {
		log := sidecars[primary].logText()
		if strings.Contains(log, "cancel done") {
			return nil
		}
		return errors.New("seen:\n" + log)
	})
	if err := pc.WaitHealthy(ctx); err != nil {
		t.Fatalf("the old primary does not rejoin as a replica: %v", err)
	}
	if err := load.WaitAcked(ctx, 20); err != nil {
		t.Fatalf("no commits after the cancel: %v", err)
	}
	if _, ok := a.evictedAt(primary); ok {
		t.Fatal("the old primary's pod was evicted by a cancelled drain")
	}
	if v := patroniMustView(ctx, t, pc); v.Leader != switched.Leader {
		t.Errorf("something switched after the cancel: %s, then %s", switched, v)
	}
	if leaders := patroniPrimaries(view, from, time.Now()); len(leaders) != 2 || leaders[0] != first.Leader || leaders[1] != switched.Leader {
		t.Errorf("primaries seen through the cancelled drain: %q, want %s then %s, and no switch back; views:%s", leaders, first.Leader, switched.Leader, view.changes())
	}

	t.Log("3. the new primary's node drains with its Patroni frozen; thawed, it switches over before the pod is evicted")
	a.cancel(t, replica) // the replica's node comes back, and its pod, so the PDB allows one eviction
	waitUndone(ctx, t, a, replica)
	if _, err := devcluster.WaitForPDB(ctx, a.c.Client, a.ns, a.name, 3, time.Minute); err != nil {
		t.Fatal(err)
	}
	old := other
	frozen := patroniFreeze(t, dir, old)
	from = time.Now()
	a.drain(t, old, v1alpha1.ModeMaintenance)
	nd = a.waitDrain(t, old, "status.hooks to say Patroni cannot be reached", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, _ := podHook(nd, a, old)
		return strings.Contains(h.Message, "cannot reach Patroni")
	})
	h, _ = podHook(nd, a, old)
	said = a.explainPod(t, nd, old)
	if !strings.Contains(said, "cannot reach Patroni") {
		t.Errorf("vacate explain says of %s: %q; want the hook's message", a.pods[old].Name, said)
	}
	if _, ok := a.evictedAt(old); ok || h.Phase == hook.Completed {
		t.Fatalf("with its Patroni frozen, the primary's hook is %s and its pod evicted: %v", h.Phase, ok)
	}
	t.Logf("with Patroni frozen: status.hooks %s %q; vacate explain: %s", h.Phase, h.Message, said)
	frozen.thaw()
	nd = a.waitDrain(t, old, "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	evicted, ok := a.evictedAt(old)
	if !ok {
		t.Fatalf("the drain is %s but the primary's pod was not seen evicted", nd.Status.Phase)
	}
	if before, _ := view.before(evicted); before != "primary "+first.Leader {
		t.Fatalf("when its pod was evicted, Patroni said %q: want %q; views:%s", before, "primary "+first.Leader, view.changes())
	}
	if leaders := patroniPrimaries(view, from, evicted); len(leaders) == 0 || leaders[0] != switched.Leader {
		t.Fatalf("the views sampled in this drain never showed %s as the primary, so they prove nothing:%s", switched.Leader, view.changes())
	}

	t.Log("4. every committed transaction is there")
	if err := load.WaitAcked(ctx, 20); err != nil {
		t.Fatalf("no commits after the drain: %v", err)
	}
	rep, err := load.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; from the drain's request to the pod's eviction: the replica's %s, the last primary's %s (its Patroni frozen at first)",
		rep, replicaEvicted.Sub(replicaFrom).Round(time.Millisecond), evicted.Sub(from).Round(time.Millisecond))
	t.Logf("Patroni's view, sampled:%s", view.changes())
	if err := rep.OK(); err != nil {
		t.Fatal(err)
	}
}

// patroniDCSIP is a loopback IP for Patroni's etcd that no pod gets: the
// last addresses of the dev cluster's pod range, which kwok hands out from
// its start.
func patroniDCSIP(t *testing.T, a *app) netip.Addr {
	t.Helper()
	p, err := netip.ParsePrefix(a.c.PodCIDR)
	if err != nil || !p.Addr().Is4() || p.Bits() > 24 {
		t.Fatalf("pod CIDR %q: want an IPv4 range of at least a /24 (%v)", a.c.PodCIDR, err)
	}
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 3 // the network's third-to-last address
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) + host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// patroniMaxLag is the harness's maximum_lag_on_failover, in bytes.
const patroniMaxLag = 1 << 20

// patroniWriteWAL writes about 12 MB of WAL on member primary, and waits
// until Patroni reports member lagging by more than maximum_lag_on_failover
// (GET /cluster, which Patroni updates every loop); it returns that lag.
func patroniWriteWAL(ctx context.Context, t *testing.T, pc *patroni.Cluster, primary int, lagging string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, pc.MemberDSN(primary))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE TABLE vacate_filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 50000) g"); err != nil {
		t.Fatalf("writing WAL on %s: %v", patroni.Name(primary), err)
	}
	var lag int64
	testutil.Eventually(t, time.Minute, "Patroni to report "+lagging+" lagging", func() error {
		v, err := pc.View(ctx)
		if err != nil {
			return err
		}
		m, _ := v.Member(lagging)
		if lag = m.Lag; lag > patroniMaxLag {
			return nil
		}
		return errors.New(v.String())
	})
	return lag
}

// patroniLagSaid is the lag in bytes a message says member has ("NAME lags
// N bytes"), or -1.
func patroniLagSaid(msg, member string) int64 {
	_, rest, ok := strings.Cut(msg, member+" lags ")
	if !ok {
		return -1
	}
	n, _, _ := strings.Cut(rest, " bytes")
	lag, err := strconv.ParseInt(n, 10, 64)
	if err != nil {
		return -1
	}
	return lag
}

func patroniMustView(ctx context.Context, t *testing.T, pc *patroni.Cluster) patroni.View {
	t.Helper()
	var v patroni.View
	testutil.Eventually(t, 2*time.Minute, "Patroni's view of the cluster", func() error {
		var err error
		v, err = pc.View(ctx)
		return err
	})
	return v
}

func patroniTimeline(v patroni.View, name string) int {
	m, _ := v.Member(name)
	return m.Timeline
}

// podHook is what the drain's status.hooks says of the pod of an
// ordinal.
func podHook(nd *v1alpha1.NodeDrain, a *app, i int) (v1alpha1.HookStatus, bool) {
	for _, h := range nd.Status.Hooks {
		if strings.Contains(h.Name, a.pods[i].Name) {
			return h, true
		}
	}
	return v1alpha1.HookStatus{}, false
}

// patroniBlockedBy says whether the drain names the pod of an ordinal as
// blocked for reason.
func patroniBlockedBy(nd *v1alpha1.NodeDrain, a *app, i int, reason string) bool {
	for _, b := range nd.Status.Blockers {
		if b.Pod == a.ns+"/"+a.pods[i].Name && b.Reason == reason {
			return true
		}
	}
	return false
}

// patroniPrimaries are the writable primaries the views sampled between
// from and to showed, in order, each once per stretch.
func patroniPrimaries(s *sampler, from, to time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, x := range s.samples {
		name, ok := strings.CutPrefix(x.view, "primary ")
		if !ok || x.at.Before(from) || !x.at.Before(to) {
			continue
		}
		if len(out) == 0 || out[len(out)-1] != name {
			out = append(out, name)
		}
	}
	return out
}

// patroniProbe reads who leads as Patroni records it, cheaply enough to
// sample every few milliseconds: the leader key in Patroni's DCS (etcd's
// JSON gateway) and, from the member holding it, whether its PostgreSQL is
// out of recovery (pg_is_in_recovery() on a connection kept open). Patroni's
// REST API, which answers the same, costs a Python request per question.
type patroniProbe struct {
	pc    *patroni.Cluster
	dcs   string
	key   string
	http  *http.Client
	conns map[int]*pgx.Conn // used by the sampler's goroutine only
}

func newPatroniProbe(pc *patroni.Cluster) *patroniProbe {
	return &patroniProbe{pc: pc, http: &http.Client{Timeout: time.Second}, conns: map[int]*pgx.Conn{},
		dcs: pc.DCSURL() + "/v3/kv/range",
		// Patroni's etcd3 keys: /<namespace>/<scope>/leader, by default
		// /service/vacate/leader for the harness's scope.
		key: base64.StdEncoding.EncodeToString([]byte("/service/vacate/leader"))}
}

// view is "primary NAME" when NAME holds the leader lock and its
// PostgreSQL accepts writes, and says what else it saw otherwise.
func (p *patroniProbe) view(ctx context.Context) string {
	leader, err := p.leader(ctx)
	switch {
	case err != nil:
		return "the DCS does not answer"
	case leader == "":
		return "nobody holds the leader lock"
	}
	i := p.pc.Index(leader)
	if i < 0 {
		return "unknown leader " + leader
	}
	writable, err := p.writable(ctx, i)
	switch {
	case err != nil:
		return leader + " holds the leader lock; its PostgreSQL does not answer"
	case !writable:
		return leader + " holds the leader lock; its PostgreSQL is in recovery"
	}
	return "primary " + leader
}

func (p *patroniProbe) leader(ctx context.Context) (string, error) {
	body, _ := json.Marshal(map[string]string{"key": p.key})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.dcs, bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct {
		KVs []struct {
			Value []byte `json:"value"`
		} `json:"kvs"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("reading the leader key: %s %v", resp.Status, err)
	}
	if len(out.KVs) == 0 {
		return "", nil
	}
	return string(out.KVs[0].Value), nil
}

func (p *patroniProbe) writable(ctx context.Context, i int) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	conn := p.conns[i]
	if conn == nil {
		c, err := pgx.Connect(ctx, p.pc.MemberDSN(i))
		if err != nil {
			return false, err
		}
		conn, p.conns[i] = c, c
	}
	var inRecovery bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
		conn.Close(context.Background())
		delete(p.conns, i)
		return false, err
	}
	return !inRecovery, nil
}

func (p *patroniProbe) close() {
	for _, c := range p.conns {
		c.Close(context.Background())
	}
}

// patroniFrozen is a member's Patroni stopped with SIGSTOP: its REST API
// accepts connections and never answers, and it neither renews nor gives up
// the leader lock; its PostgreSQL (in a session of its own) runs on.
type patroniFrozen struct{ pgid int }

// patroniFreeze stops member i's Patroni process group until thaw (or the
// test's end).
func patroniFreeze(t *testing.T, dir string, i int) *patroniFrozen {
	t.Helper()
	config := filepath.Join(dir, patroni.Name(i), "patroni.yml")
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err != nil || !bytes.HasSuffix(bytes.TrimRight(data, "\x00"), []byte("\x00"+config)) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if err != nil {
			continue
		}
		pgid, err := syscall.Getpgid(pid)
		if err != nil {
			continue
		}
		if err := syscall.Kill(-pgid, syscall.SIGSTOP); err != nil {
			t.Fatalf("freezing %s's Patroni: %v", patroni.Name(i), err)
		}
		fr := &patroniFrozen{pgid: pgid}
		t.Cleanup(fr.thaw)
		return fr
	}
	t.Fatalf("no Patroni process runs %s", config)
	return nil
}

func (f *patroniFrozen) thaw() { _ = syscall.Kill(-f.pgid, syscall.SIGCONT) }

// patroniLog passes the harness's progress lines to the test's log.
type patroniLog struct{ t *testing.T }

func (w patroniLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestPatroniTwoClustersOnTheSameAddresses starts two one-member clusters of
// the harness on the same IPs (the member's and the DCS's), as two runs of
// this package on one machine do when their dev clusters' pod ranges
// coincide: each must listen on ports of its own (PostgreSQL, Patroni's REST
// API, etcd), so that both start and each keeps its own data. It needs no
// dev cluster.
func TestPatroniTwoClustersOnTheSameAddresses(t *testing.T) {
	// Outside the dev clusters' pod ranges (127.64.0.0 to 127.191.255.255).
	dcs, member := netip.MustParseAddr("127.250.42.253"), netip.MustParseAddr("127.250.42.1")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var clusters []*patroni.Cluster
	for n := range 2 {
		c, err := patroni.Start(ctx, patroni.Options{Dir: t.TempDir(), DCSIP: dcs, MemberIPs: []netip.Addr{member}})
		if err != nil {
			t.Fatalf("starting cluster %d on %s (DCS %s): %v", n, member, dcs, err)
		}
		t.Cleanup(c.Stop)
		clusters = append(clusters, c)
	}
	a, b := clusters[0], clusters[1]
	if a.RESTURL(0) == b.RESTURL(0) || a.DSN() == b.DSN() || a.DCSURL() == b.DCSURL() {
		t.Fatalf("both clusters listen on %s, %s and %s", a.RESTURL(0), a.DSN(), a.DCSURL())
	}
	ca, err := pgx.Connect(ctx, a.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close(context.Background())
	if _, err := ca.Exec(ctx, "CREATE TABLE only_in_the_first (id int)"); err != nil {
		t.Fatal(err)
	}
	cb, err := pgx.Connect(ctx, b.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer cb.Close(context.Background())
	var found bool
	if err := cb.QueryRow(ctx, "SELECT to_regclass('only_in_the_first') IS NOT NULL").Scan(&found); err != nil {
		t.Fatal(err)
	}
	if found {
		t.Fatal("the second cluster has the first's table: both are one PostgreSQL")
	}
}
