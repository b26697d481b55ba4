package stateful_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers/redis"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
)

// TestRedisSentinel drains Redis with Sentinel (a primary, two replicas,
// three sentinels; the real servers, one member per pod) with
// examples/redis-sentinel under a client load whose every write is
// acknowledged by WAIT 1:
//
//  0. with both replicas' servers stopped, a drain of the primary's node
//     holds before anything is paused, and status.hooks and `vacate
//     explain` name each replica and why it cannot take over; with two of
//     the three sentinels stopped too, they name the sentinels that do not
//     answer; the drain is cancelled and the members started again;
//  1. a drain of the primary's node is cancelled while the failover holds
//     the primary's writes paused (a replica is frozen, so it cannot catch
//     up): vacate-hook kills the failover and its cancel resumes the
//     writes; the primary stays;
//  2. the primary's node drains, and vacate-hook is killed with its
//     commands midway through the failover (a container crash), then
//     restarted: it resumes, the sentinels promote a replica, and only then
//     is the pod evicted;
//  3. every acknowledged write is there.
func TestRedisSentinel(t *testing.T) {
	a := newApp(t, "redis")
	ctx := testenv.Context(t)
	// The sentinels take a frozen replica for down after 30 s, not 5: the
	// first part freezes one for longer than 5 s, and it must stay a
	// candidate the failover waits for.
	rc, err := redis.Start(ctx, redis.Config{IPs: a.IPs(), Dir: t.TempDir(), Password: "stateful-test", DownAfter: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Stop)
	sidecars := make([]*sidecarProc, len(a.pods))
	for i := range a.pods {
		// Writes stay paused up to 30 s for the replicas to catch up (the
		// recipe's default is 5 s), so that the cancel of the first part
		// lands while they are.
		env := append(rc.SidecarEnv(i), "REDIS_CATCHUP_SECONDS=30", "REDIS_PAUSE_MS=50000")
		sidecars[i] = a.startSidecar(t, i, "redis-sentinel", env)
	}
	// An evicted pod's containers stop: its sidecar, server and sentinel.
	a.setOnEvict(func(i int) {
		sidecars[i].stop()
		if err := rc.StopMember(i); err != nil {
			t.Errorf("stopping member %d: %v", i, err)
		}
	})
	view := sampleView(t, 50*time.Millisecond, func(ctx context.Context) string {
		v := rc.View(ctx)
		p, err := v.AgreedPrimary()
		if err != nil {
			return "no agreed primary: " + err.Error()
		}
		if s, ok := v.Server(p); !ok || s.Role != "master" {
			return fmt.Sprintf("sentinels name %s, which says it is %q", p, s.Role)
		}
		return "primary " + p
	})
	load := rc.StartLoad(ctx, redis.LoadOptions{})
	if err := load.WaitProgress(ctx, 20); err != nil {
		t.Fatal(err)
	}
	primary, err := rc.View(ctx).PrimaryIndex()
	if err != nil {
		t.Fatal(err)
	}
	frozen := (primary + 1) % len(a.pods)
	primaryAddr := rc.Member(primary).Server.Addr
	t.Logf("the primary is %s, on %s (pod %s)", primaryAddr, a.nodes[primary], a.pods[primary].Name)

	t.Log("0. a drain of the primary's node while no replica can take over: it holds, and says which replicas and why, then which sentinels do not answer")
	redisRefusals(ctx, t, a, rc, sidecars, primary)

	t.Log("1. a drain of the primary's node, cancelled while the failover holds writes paused")
	if err := rc.Member(frozen).Server.Freeze(); err != nil {
		t.Fatal(err)
	}
	a.drain(t, primary, v1alpha1.ModeMaintenance)
	waitPaused(ctx, t, rc, primaryAddr)
	a.cancel(t, primary)
	testutil.Eventually(t, 2*time.Minute, "the failover to be stopped and cancelled", func() error {
		log := sidecars[primary].logText()
		if strings.Contains(log, "the running command was stopped") && strings.Contains(log, "cancel done") {
			return nil
		}
		return errors.New("seen:\n" + log)
	})
	if err := rc.Member(frozen).Server.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := load.WaitProgress(ctx, 20); err != nil {
		t.Fatalf("writes after the cancel: %v", err)
	}
	if p, err := rc.View(ctx).PrimaryIndex(); err != nil || p != primary {
		t.Fatalf("after the cancel the primary is member %d (%v), want %d, unmoved", p, err, primary)
	}
	if _, ok := a.evictedAt(primary); ok {
		t.Fatal("the primary's pod was evicted by a cancelled drain")
	}
	if err := rc.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	waitUndone(ctx, t, a, primary)

	t.Log("2. the primary's node drains; vacate-hook crashes midway through the failover and restarts")
	start := time.Now()
	mark := len(sidecars[primary].logText())
	a.drain(t, primary, v1alpha1.ModeMaintenance)
	testutil.Eventually(t, 2*time.Minute, "vacate-hook to run the failover", func() error {
		log := sidecars[primary].logText()
		if logLine(log[mark:], "msg=running", "redis-sentinel.sh failover") {
			return nil
		}
		return errors.New("seen:\n" + log)
	})
	time.Sleep(100 * time.Millisecond) // midway, not at its first instruction
	sidecars[primary].crash()
	sidecars[primary].start(t)
	nd := a.waitDrain(t, primary, "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	if !strings.Contains(sidecars[primary].logText(), "resuming a drain after a restart") {
		t.Errorf("vacate-hook did not resume the drain after its restart:\n%s", sidecars[primary].logText())
	}
	evicted, ok := a.evictedAt(primary)
	if !ok {
		t.Fatalf("the drain is %s but the primary's pod was not seen evicted", nd.Status.Phase)
	}
	before, _ := view.before(evicted)
	if !strings.HasPrefix(before, "primary ") || strings.TrimPrefix(before, "primary ") == primaryAddr {
		t.Fatalf("when its pod was evicted, the system said %q: want another primary, agreed by the sentinels; views:%s", before, view.changes())
	}
	if !strings.Contains(view.changes(), "primary "+primaryAddr) {
		t.Fatalf("the views sampled never showed the old primary, so they prove nothing:%s", view.changes())
	}
	if err := load.WaitProgress(ctx, 20); err != nil {
		t.Fatalf("writes after the drain: %v", err)
	}
	rep, err := load.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; longest outage during the drain %s; drain took %s",
		rep, load.LongestOutageSince(start).Round(time.Millisecond), evicted.Sub(start).Round(time.Millisecond))
	if err := rep.OK(); err != nil {
		t.Fatal(err)
	}
}

// redisRefusals is part 0 of TestRedisSentinel: the refusals of the
// recipe's check, as the drain shows them, with the real servers and
// sentinels. It leaves every member running and the drain undone.
func redisRefusals(ctx context.Context, t *testing.T, a *app, rc *redis.Cluster, sidecars []*sidecarProc, primary int) {
	t.Helper()
	primaryAddr := rc.Member(primary).Server.Addr
	var replicas []int
	for i := range rc.Members() {
		if i != primary {
			replicas = append(replicas, i)
		}
	}
	for _, r := range replicas {
		if err := rc.Member(r).Server.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	// Every sentinel sees both replicas gone (its link to each is
	// disconnected) before the drain, so the first check already says so.
	testutil.Eventually(t, time.Minute, "the sentinels to see the replicas disconnected", func() error {
		for _, s := range rc.SentinelAddrs() {
			flags, err := redisReplicaFlags(ctx, rc, s)
			if err != nil {
				return err
			}
			for _, r := range replicas {
				if f := flags[rc.Member(r).Server.Addr]; !strings.Contains(f, "disconnected") {
					return fmt.Errorf("sentinel %s: replica %s has flags %q", s, rc.Member(r).Server.Addr, f)
				}
			}
		}
		return nil
	})
	a.drain(t, primary, v1alpha1.ModeMaintenance)
	mark := len(sidecars[primary].logText())
	nd := a.waitDrain(t, primary, "status.hooks to say why the failover was refused", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, _ := podHook(nd, a, primary)
		return strings.Contains(h.Message, "redis-sentinel.sh check exited 1")
	})
	h, _ := podHook(nd, a, primary)
	said := a.explainPod(t, nd, primary)
	t.Logf("with both replicas stopped: status.hooks %s %q; vacate explain: %s", h.Phase, h.Message, said)
	for where, msg := range map[string]string{"status.hooks": h.Message, "vacate explain": said} {
		want := []string{"no replica can take over from " + primaryAddr, "unreachable"}
		for _, r := range replicas {
			want = append(want, rc.Member(r).Server.Addr)
		}
		for _, w := range want {
			if !strings.Contains(msg, w) {
				t.Errorf("%s says %q: want %q (each replica named, and why it cannot take over)", where, msg, w)
			}
		}
	}
	if _, ok := a.evictedAt(primary); ok || h.Phase == hook.Completed {
		t.Fatalf("with no replica to promote, the primary's hook is %s and its pod evicted: %v", h.Phase, ok)
	}
	if strings.Contains(sidecars[primary].logText()[mark:], "redis-sentinel.sh failover") {
		t.Errorf("the failover ran although check refused:\n%s", sidecars[primary].logText()[mark:])
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rc.Client(primaryAddr).Set(wctx, "vacate-probe", "x", 0).Err(); err != nil {
		t.Errorf("a write to the primary while the drain holds: %v; want it taken (check refuses before pausing)", err)
	}

	var sentinels []string
	for _, r := range replicas {
		if err := rc.Member(r).Sentinel.Stop(); err != nil {
			t.Fatal(err)
		}
		sentinels = append(sentinels, rc.Member(r).Sentinel.Addr)
	}
	nd = a.waitDrain(t, primary, "status.hooks to say which sentinels do not answer", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, _ := podHook(nd, a, primary)
		return strings.Contains(h.Message, "sentinels answered")
	})
	h, _ = podHook(nd, a, primary)
	said = a.explainPod(t, nd, primary)
	t.Logf("with two sentinels stopped too: status.hooks %s %q; vacate explain: %s", h.Phase, h.Message, said)
	for where, msg := range map[string]string{"status.hooks": h.Message, "vacate explain": said} {
		for _, w := range append([]string{"only 1 of 3 sentinels answered"}, sentinels...) {
			if !strings.Contains(msg, w) {
				t.Errorf("%s says %q: want %q (the sentinels that do not answer named)", where, msg, w)
			}
		}
	}

	a.cancel(t, primary)
	for _, r := range replicas {
		if err := rc.StartMember(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := rc.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	waitUndone(ctx, t, a, primary)
	if p, err := rc.View(ctx).PrimaryIndex(); err != nil || p != primary {
		t.Fatalf("after the refused drain the primary is member %d (%v), want %d, unmoved", p, err, primary)
	}
}

// redisReplicaFlags is each replica's flags as a sentinel says them
// (SENTINEL REPLICAS), by host:port.
func redisReplicaFlags(ctx context.Context, rc *redis.Cluster, sentinel string) (map[string]string, error) {
	list, err := rc.Client(sentinel).Do(ctx, "SENTINEL", "REPLICAS", rc.MasterName()).Slice()
	if err != nil {
		return nil, fmt.Errorf("sentinel %s: %w", sentinel, err)
	}
	out := map[string]string{}
	for _, item := range list {
		fields, _ := item.([]any)
		kv := map[string]string{}
		for i := 0; i+1 < len(fields); i += 2 {
			kv[fmt.Sprint(fields[i])] = fmt.Sprint(fields[i+1])
		}
		out[kv["ip"]+":"+kv["port"]] = kv["flags"]
	}
	return out, nil
}

// waitPaused waits until a write to the primary blocks: the failover has
// paused writes (and waits for the frozen replica).
func waitPaused(ctx context.Context, t *testing.T, rc *redis.Cluster, addr string) {
	t.Helper()
	testutil.Eventually(t, time.Minute, "writes to "+addr+" to be paused", func() error {
		pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		last := rc.Client(addr).Set(pctx, "vacate-probe", "x", 0).Err()
		if last != nil && pctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("last write: %v", last)
	})
}

// waitUndone waits until the cancelled drain is gone and its node
// schedulable again.
func waitUndone(ctx context.Context, t *testing.T, a *app, i int) {
	t.Helper()
	testutil.Eventually(t, 2*time.Minute, "the cancelled drain to be undone", func() error {
		n, err := a.c.Client.CoreV1().Nodes().Get(ctx, a.nodes[i], metav1.GetOptions{})
		if err == nil && !n.Spec.Unschedulable {
			nd := &v1alpha1.NodeDrain{}
			if apierrors.IsNotFound(a.cl.Get(ctx, types.NamespacedName{Name: a.nodes[i]}, nd)) {
				return nil
			}
		}
		return errors.New("node " + a.nodes[i])
	})
}

// logLine says whether one line of a log has every part.
func logLine(log string, parts ...string) bool {
	for _, l := range strings.Split(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(l, p)
		}
		if all {
			return true
		}
	}
	return false
}

// TestRedisTwoClustersOnTheSameAddresses starts two clusters of the
// harness on the same IPs, as two runs of this package on one machine do
// when their dev clusters' pod ranges coincide: each must listen on ports
// of its own, so that every process of both runs and each keeps its own
// data. It needs no dev cluster.
func TestRedisTwoClustersOnTheSameAddresses(t *testing.T) {
	// Outside the dev clusters' pod ranges (127.64.0.0 to 127.191.255.255).
	ips := []string{"127.250.41.1", "127.250.41.2"}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var clusters []*redis.Cluster
	for range 2 {
		c, err := redis.Start(ctx, redis.Config{IPs: ips, Dir: t.TempDir(), Password: "two-runs"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		clusters = append(clusters, c)
	}
	for n, c := range clusters {
		for _, m := range c.Members() {
			for _, p := range []*redis.Process{m.Server, m.Sentinel} {
				if !p.Running() {
					t.Errorf("cluster %d: %s (%s) exited:\n%s", n, p.Name, p.Addr, p.Log())
				}
			}
		}
	}
	if t.Failed() {
		return
	}
	a, b := clusters[0], clusters[1]
	if a.Member(0).Server.Addr == b.Member(0).Server.Addr || a.SentinelAddrs()[0] == b.SentinelAddrs()[0] {
		t.Fatalf("both clusters listen on %s and %s", a.Member(0).Server.Addr, a.SentinelAddrs()[0])
	}
	pa, err := a.View(ctx).AgreedPrimary()
	if err != nil {
		t.Fatal(err)
	}
	pb, err := b.View(ctx).AgreedPrimary()
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Client(pa).Set(ctx, "written-to", "the first cluster", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := b.Client(pb).Get(ctx, "written-to").Result(); !errors.Is(err, goredis.Nil) {
		t.Fatalf("the second cluster's primary %s has the first's key: %q (%v)", pb, v, err)
	}
}
