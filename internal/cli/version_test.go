package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/explain"
	"github.com/vacate-dev/vacate/internal/leader"
	"github.com/vacate-dev/vacate/internal/version"
)

// TestVersionNamesTheLeadersBuild: a Lease written by leader election's
// own Lease lock with vacate's labels (as vacate-controller's leader
// writes it) is what `vacate version` reads, for a person bound to
// vacate-user; a minor version apart, it warns; once the Lease runs out,
// it says no controller runs.
func TestVersionNamesTheLeadersBuild(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	ns := testenv.Namespace(t, c)
	leadAs(t, c, ns, "ctl-a", "v0.2.0")
	bindUserRole(t, c, "version-reader")
	u := newUser(t, c, "version-reader")
	lease := ns + "/vacate-controller"

	defer func(old func() version.Info) { clientVersion = old }(clientVersion)
	clientVersion = func() version.Info {
		return version.Info{Version: "v0.1.3", GoVersion: "go1.26", Platform: "linux/amd64"}
	}
	code, out, errOut := u.vacate("version")
	if code != 0 {
		t.Fatalf("vacate version exited %d: %s", code, errOut)
	}
	if want := "controller: v0.2.0, leader ctl-a (Lease " + lease + ", renewed "; !strings.Contains(out, want) {
		t.Errorf("vacate version printed\n%s\nwant a line with %q", out, want)
	}
	if !strings.HasPrefix(out, "vacate:     v0.1.3, go1.26, linux/amd64\n") {
		t.Errorf("vacate version printed\n%s\nwant this vacate's version first", out)
	}
	if want := "Warning: this vacate is v0.1.3 and the controller is v0.2.0"; !strings.Contains(errOut, want) {
		t.Errorf("vacate version warned\n%s\nwant %q", errOut, want)
	}

	clientVersion = func() version.Info { return version.Info{Version: "v0.2.7"} }
	if _, _, errOut := u.vacate("version"); strings.Contains(errOut, "the controller is v0.2.0") {
		t.Errorf("a v0.2.7 CLI warned about a v0.2.0 controller: %s", errOut)
	}
	_, out, _ = u.vacate("version", "-o", "json")
	var r versionReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("vacate version -o json: %v\n%s", err, out)
	}
	var mine *controllerLease
	for i := range r.Controllers {
		if r.Controllers[i].Lease == lease {
			mine = &r.Controllers[i]
		}
	}
	if r.Client.Version != "v0.2.7" || mine == nil || mine.Version != "v0.2.0" || !mine.Held || mine.Holder != "ctl-a" {
		t.Errorf("vacate version -o json: client %+v, lease %s: %+v", r.Client, lease, mine)
	}

	// The holder stopped renewing two minutes ago: no one holds it.
	renewedAgo(t, c, ns, 2*time.Minute)
	_, out, _ = u.vacate("version")
	if want := "controller: none running: no one holds the Lease " + lease + ", renewed 2m"; !strings.Contains(out, want) {
		t.Errorf("vacate version printed\n%s\nwant a line with %q", out, want)
	}
	// With no controller holding its Lease, a drain is still requested,
	// and says that nothing acts on it, rather than waiting silently.
	leases, err := c.Client.CoordinationV1().Leases("").List(ctx, metav1.ListOptions{LabelSelector: leader.LabelName + "=" + leader.ControllerName})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for i := range leases.Items {
		if leaseOf(&leases.Items[i], time.Now()).Held {
			held++
		}
	}
	if held > 0 {
		t.Logf("%d other Lease(s) held in this cluster: the no-controller warning is not checked", held)
	} else {
		node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "version-drain", Count: 1})[0]
		code, _, errOut := u.vacate("drain", node, "--wait-timeout", "1s")
		if code != ExitTimeout || !strings.Contains(errOut, "Warning: no vacate-controller is running (no one holds the Lease "+lease) ||
			!strings.Contains(errOut, "nothing acts on them until one runs") {
			t.Errorf("drain --wait-timeout with no controller: exit %d, stderr:\n%s", code, errOut)
		}
		u.vacate("cancel", node, "--wait=false")
	}
	if code, out, _ := u.vacate("version", "--client", "--kubeconfig", "/nonexistent"); code != 0 || strings.Contains(out, "controller") {
		t.Errorf("vacate version --client exited %d and printed %q: it must not contact the cluster", code, out)
	}
}

// leadAs writes, with leader election's own Lease lock and vacate's
// labels, as vacate-controller's leader does, the Lease
// <ns>/vacate-controller held by holder, a controller of version v, renewed
// now for a minute, until the test ends.
func leadAs(t *testing.T, c *devcluster.Cluster, ns, holder, v string) {
	t.Helper()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: ns, Name: "vacate-controller"},
		Client:     c.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: holder},
		Labels:     leader.LeaseLabels(version.Info{Version: v}, ""),
	}
	now := metav1.NewTime(time.Now())
	if err := lock.Create(testenv.Context(t), resourcelock.LeaderElectionRecord{HolderIdentity: holder, LeaseDurationSeconds: 60, AcquireTime: now, RenewTime: now}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoordinationV1().Leases(ns).Delete(context.Background(), "vacate-controller", metav1.DeleteOptions{})
	})
}

// renewedAgo sets the renew time of the Lease <ns>/vacate-controller to
// ago before now.
func renewedAgo(t *testing.T, c *devcluster.Cluster, ns string, ago time.Duration) {
	t.Helper()
	ctx := testenv.Context(t)
	l, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, "vacate-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.RenewTime = &metav1.MicroTime{Time: time.Now().Add(-ago)}
	if _, err := c.Client.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestWarnAboutControllers covers the warnings drain and version print.
func TestWarnAboutControllers(t *testing.T) {
	held := func(lease, v string) controllerLease {
		return controllerLease{Lease: lease, Version: v, Held: true, Holder: "x"}
	}
	gone := func(lease string) controllerLease { return controllerLease{Lease: lease, Version: "v0.2.0"} }
	for _, c := range []struct {
		name     string
		mine     string
		leases   []controllerLease
		warnings []string // one per warning line
	}{
		{"same minor", "v0.2.1", []controllerLease{held("vacate-system/vacate-controller", "v0.2.0")}, nil},
		{"other minor", "v0.3.0", []controllerLease{held("vacate-system/vacate-controller", "v0.2.0")}, []string{"this vacate is v0.3.0 and the controller is v0.2.0"}},
		{"a development build", "dev", []controllerLease{held("vacate-system/vacate-controller", "v0.2.0")}, nil},
		{"none held", "v0.2.0", []controllerLease{gone("vacate-system/vacate-controller")}, []string{"no vacate-controller is running (no one holds the Lease vacate-system/vacate-controller): drains are recorded but nothing acts on them until one runs; see 'kubectl --namespace vacate-system get pods'"}},
		{"an old lease beside the leader", "v0.2.0", []controllerLease{gone("old/vacate-controller"), held("vacate-system/vacate-controller", "v0.2.0")}, nil},
		{"two leaders", "v0.2.0", []controllerLease{held("a/vacate-controller", "v0.2.0"), held("b/vacate-controller", "v0.2.0")}, []string{"2 vacate-controllers lead at once"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var errOut bytes.Buffer
			warnAboutControllers(Streams{Err: &errOut}, c.mine, c.leases)
			lines := strings.Count(errOut.String(), "Warning: ")
			if lines != len(c.warnings) {
				t.Errorf("warned %d times, want %d:\n%s", lines, len(c.warnings), errOut.String())
			}
			for _, w := range c.warnings {
				if !strings.Contains(errOut.String(), w) {
					t.Errorf("warnings lack %q:\n%s", w, errOut.String())
				}
			}
		})
	}
}

// TestLeaseOf reads a Lease's holder and whether it is held.
func TestLeaseOf(t *testing.T) {
	now := time.Now()
	holder, dur := "ctl", int32(15)
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "l", Labels: map[string]string{leader.LabelVersion: "v1.0.0"}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: now.Add(-10 * time.Second)}}}
	if c := leaseOf(l, now); !c.Held || c.Version != "v1.0.0" || c.Lease != "n/l" {
		t.Errorf("renewed 10s ago, for 15s: %+v", c)
	}
	if c := leaseOf(l, now.Add(6*time.Second)); c.Held {
		t.Errorf("renewed 16s ago, for 15s: held")
	}
	empty := ""
	l.Spec.HolderIdentity = &empty // released
	if c := leaseOf(l, now); c.Held {
		t.Errorf("released: held")
	}
}

// TestVersionSaysWhetherTheLeaderCoordinatesEvictionRequests: the leader's
// Lease carries its EvictionRequest mode (leader.LeaseLabels), and vacate
// version says it in words; a Lease without it (an older controller) says
// nothing of it.
func TestVersionSaysWhetherTheLeaderCoordinatesEvictionRequests(t *testing.T) {
	now := time.Now()
	holder, dur := "ctl", int32(15)
	for state, want := range map[string]string{
		leader.EvictionRequestsCoordinating: "; coordinates EvictionRequests (lifecycle.k8s.io/v1alpha1); drains request through them",
		leader.EvictionRequestsRequesting:   "; EvictionRequests: drains request through them, another coordinator owns them (--eviction-requests=request-only)",
		leader.EvictionRequestsOff:          "; EvictionRequests: off (--eviction-requests=off: drains evict every pod themselves)",
		leader.EvictionRequestsNotServed:    "; EvictionRequests: not served by the API server (feature gate EvictionRequestAPI off)",
		"":                                  ")",
	} {
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: "n", Name: "l", Labels: leader.LeaseLabels(version.Info{Version: "v1.0.0"}, state)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &metav1.MicroTime{Time: now}}}
		c := leaseOf(l, now)
		if c.EvictionRequests != state || !strings.HasSuffix(c.describe(now), want) {
			t.Errorf("Lease labelled %q: %q (%+v), want it to end %q", state, c.describe(now), c, want)
		}
	}
}

// TestExplainSaysHowPodsWithRespondersLeave: vacate explain says, from the
// leader's Lease, whether a drain asks for pods that declare eviction
// responders with EvictionRequests (and who coordinates them) or evicts
// them; nothing where the API is not served, or no one leads.
func TestExplainSaysHowPodsWithRespondersLeave(t *testing.T) {
	for state, want := range map[string]string{
		leader.EvictionRequestsCoordinating: "asked for with EvictionRequests, which vacate-controller coordinates (--eviction-requests)",
		leader.EvictionRequestsRequesting:   "asked for with EvictionRequests, which another coordinator runs (--eviction-requests=request-only)",
		leader.EvictionRequestsOff:          "evicted by the drain, as every pod (--eviction-requests=off)",
		leader.EvictionRequestsNotServed:    "",
		"":                                  "",
	} {
		standby := controllerLease{EvictionRequests: leader.EvictionRequestsCoordinating}
		if got := evictionRequestsLine([]controllerLease{standby, {Held: true, EvictionRequests: state}}); got != want {
			t.Errorf("leader's Lease labelled %q: %q, want %q", state, got, want)
		}
	}
	if got := evictionRequestsLine([]controllerLease{{EvictionRequests: leader.EvictionRequestsCoordinating}}); got != "" {
		t.Errorf("no one leads: %q, want nothing", got)
	}
	var out strings.Builder
	e := explain.Explanation{State: "drain of node n1: Evicting", Idle: "idle", EvictionRequests: "asked for with EvictionRequests"}
	if err := e.Write(&out, time.Now()); err != nil || !strings.Contains(out.String(), "\npods with eviction responders: asked for with EvictionRequests\n") {
		t.Errorf("explain's text %q (%v) does not carry the line", out.String(), err)
	}
}
