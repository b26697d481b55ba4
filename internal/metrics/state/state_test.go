package state_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/metrics/state"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// t0 is the scenario's reference time; every timestamp is relative to it.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) *metav1.Time { return &metav1.Time{Time: t0.Add(d)} }

func secs(d time.Duration) string { return fmt.Sprint(float64(t0.Add(d).UnixMilli()) / 1e3) }

func duration(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }

func reader(t *testing.T, objs ...client.Object) client.Reader {
	t.Helper()
	scheme, err := evacuation.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()
}

func closed() <-chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}

// TestStandbyReportsOnlyThatItWaits: before it is elected a replica
// reports no object, so two replicas never count a drain twice.
func TestStandbyReportsOnlyThatItWaits(t *testing.T) {
	drain := &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: v1alpha1.NodeDrainSpec{NodeName: "n1"}}
	c := state.New(reader(t, drain), make(chan struct{}), logr.Discard())
	want := `
# HELP vacate_controller_leader 1 if this replica leads (runs the controllers and reports the state metrics), 0 while it waits for the Lease.
# TYPE vacate_controller_leader gauge
vacate_controller_leader 0
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestLeaderReportsDrainsEvacuationsAndDeletedNodes: the leader reports
// each drain's phase, pods, start, Blocked condition and deadline (the
// earlier of its requesters' and its policy's timeouts.drain), evacuations
// by provider and phase with the last sign of life of unfinished ones, the
// providers' timeouts, and deleted nodes held by the finalizer with when
// timeouts.nodeDeletion releases them.
func TestLeaderReportsDrainsEvacuationsAndDeletedNodes(t *testing.T) {
	objs := append(leaderPoliciesAndNodes(), leaderDrains()...)
	c := state.New(reader(t, append(objs, leaderEvacuations()...)...), closed(), logr.Discard())
	want := wantLeaderMetrics()
	err := testutil.CollectAndCompare(c, strings.NewReader(want), "vacate_controller_leader", "vacate_drain_blocked_since_timestamp_seconds",
		"vacate_drain_deadline_timestamp_seconds", "vacate_drain_phase", "vacate_drain_start_timestamp_seconds",
		"vacate_evacuation_heartbeat_timestamp_seconds", "vacate_evacuation_provider_timeout_seconds", "vacate_evacuations",
		"vacate_node_deletion_release_timestamp_seconds", "vacate_node_deletion_timestamp_seconds")
	if err != nil {
		t.Error(err)
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(wantDrainPods()), "vacate_drain_pods"); err != nil {
		t.Error(err)
	}
}

// leaderPoliciesAndNodes are two policies (pool-a, which selects the nodes
// labelled pool=a, and named) and the nodes: a1 live, a2 and b1 deleted
// and held by vacate's finalizer, b2 deleted and held by another's.
func leaderPoliciesAndNodes() []client.Object {
	return []client.Object{
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "pool-a"}, Spec: v1alpha1.DrainPolicySpec{
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}},
			Timeouts:     v1alpha1.Timeouts{Drain: duration(time.Hour), NodeDeletion: duration(30 * time.Minute)},
		}},
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "named"}, Spec: v1alpha1.DrainPolicySpec{
			Timeouts: v1alpha1.Timeouts{Drain: duration(2 * time.Hour)},
		}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"pool": "a"}}},
		// Deleted and held: by pool-a's 30m, and by the built-in 1h.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a2", Labels: map[string]string{"pool": "a"},
			DeletionTimestamp: at(10 * time.Minute), Finalizers: []string{v1alpha1.FinalizerDrain}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b1",
			DeletionTimestamp: at(20 * time.Minute), Finalizers: []string{v1alpha1.FinalizerDrain}}},
		// Deleted, held by someone else's finalizer only: not vacate's.
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "b2",
			DeletionTimestamp: at(20 * time.Minute), Finalizers: []string{"example.com/other"}}},
	}
}

// leaderDrains are a drain in each state the metrics tell apart: blocked
// with a requester's deadline, on a deleted node, failed on a node that is
// gone, drained, just requested.
func leaderDrains() []client.Object {
	return []client.Object{
		// Blocked, with a requester's deadline before pool-a's timeout.
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "a1"},
			Spec: v1alpha1.NodeDrainSpec{NodeName: "a1", Requesters: []v1alpha1.Requester{{Name: "agent:aws-spot", Deadline: at(40 * time.Minute)}}},
			Status: v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseEvicting, Policy: "pool-a", Total: 5, Evicted: 2, Remaining: 3, Blocked: 2,
				StartTime: at(0), Deadline: &v1alpha1.DrainDeadline{Time: *at(40 * time.Minute), Requester: "agent:aws-spot"},
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionBlocked, Status: metav1.ConditionTrue,
					Reason: v1alpha1.ReasonBlocked, LastTransitionTime: *at(5 * time.Minute)}}}},
		// The deleted node's drain: pool-a's timeout from its start.
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "a2"},
			Spec:   v1alpha1.NodeDrainSpec{NodeName: "a2", Requesters: []v1alpha1.Requester{{Name: "delete"}}},
			Status: v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseEvacuating, Total: 1, Remaining: 1, StartTime: at(11 * time.Minute)}},
		// A node of no pool whose drain names a policy, on a node that is gone.
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "gone"},
			Spec: v1alpha1.NodeDrainSpec{NodeName: "gone", PolicyName: "named", Requesters: []v1alpha1.Requester{{Name: "cli:alice"}}},
			Status: v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseFailed, StartTime: at(0),
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionBlocked, Status: metav1.ConditionTrue,
					Reason: v1alpha1.ReasonDrainTimeout, LastTransitionTime: *at(2 * time.Hour)}}}},
		// Drained: no deadline any more, Blocked False.
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "b1"},
			Spec: v1alpha1.NodeDrainSpec{NodeName: "b1", Requesters: []v1alpha1.Requester{{Name: "taint"}}},
			Status: v1alpha1.NodeDrainStatus{Phase: v1alpha1.PhaseDrained, Total: 4, Evicted: 4, StartTime: at(0),
				Conditions: []metav1.Condition{{Type: v1alpha1.ConditionBlocked, Status: metav1.ConditionFalse,
					Reason: v1alpha1.ReasonNotBlocked, LastTransitionTime: *at(time.Minute)}}}},
		// Just requested: Pending, nothing else known.
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "new"},
			Spec: v1alpha1.NodeDrainSpec{NodeName: "new", Requesters: []v1alpha1.Requester{{Name: "cli:bob"}}}},
	}
}

// leaderEvacuations are two providers and their Evacuations: in progress,
// completed, never answered, completed for an older request, released.
func leaderEvacuations() []client.Object {
	return []client.Object{
		&v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "store"}, Spec: v1alpha1.EvacuationProviderSpec{Timeout: duration(30 * time.Second)}},
		&v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: "db"}},
		evac("a1.store", "a1", "store", 1, v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationInProgress, ObservedGeneration: 1, HeartbeatTime: at(3 * time.Minute)}, nil),
		evac("b1.store", "b1", "store", 1, v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCompleted, ObservedGeneration: 1, HeartbeatTime: at(4 * time.Minute)}, nil),
		// Never answered: its creation is its last sign of life.
		evac("a2.db", "a2", "db", 1, v1alpha1.EvacuationStatus{}, nil),
		// Completed for an older request: Pending for the current one.
		evac("a1.db", "a1", "db", 2, v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCompleted, ObservedGeneration: 1, HeartbeatTime: at(6 * time.Minute)}, nil),
		// Released: nobody waits for it any more.
		evac("gone.db", "gone", "db", 1, v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationFailed, ObservedGeneration: 1, HeartbeatTime: at(time.Minute)},
			&v1alpha1.EvacuationRelease{By: "alice", Time: *at(time.Hour)}),
	}
}

// wantLeaderMetrics are the metrics the leader reports for those objects,
// but the drains' pods (wantDrainPods).
func wantLeaderMetrics() string {
	return fmt.Sprintf(`
# HELP vacate_controller_leader 1 if this replica leads (runs the controllers and reports the state metrics), 0 while it waits for the Lease.
# TYPE vacate_controller_leader gauge
vacate_controller_leader 1
# HELP vacate_drain_blocked_since_timestamp_seconds When each NodeDrain's Blocked condition became True, while it is True, by the condition's reason (PodsBlocked, DrainTimeout, DeadlinePassed, EvacuationTimedOut, ...).
# TYPE vacate_drain_blocked_since_timestamp_seconds gauge
vacate_drain_blocked_since_timestamp_seconds{node="a1",reason="PodsBlocked"} %[1]s
vacate_drain_blocked_since_timestamp_seconds{node="gone",reason="DrainTimeout"} %[2]s
# HELP vacate_drain_deadline_timestamp_seconds When each NodeDrain that is neither Drained nor undone runs out of time: the earlier of its start plus its DrainPolicy's timeouts.drain and its requesters' earliest deadline (status.deadline); absent when neither applies.
# TYPE vacate_drain_deadline_timestamp_seconds gauge
vacate_drain_deadline_timestamp_seconds{node="a1"} %[3]s
vacate_drain_deadline_timestamp_seconds{node="a2"} %[4]s
vacate_drain_deadline_timestamp_seconds{node="gone"} %[2]s
# HELP vacate_drain_phase 1 for each NodeDrain, by node, its status.phase (Pending until it has one) and its DrainPolicy (status.policy; empty: the built-in defaults).
# TYPE vacate_drain_phase gauge
vacate_drain_phase{node="a1",phase="Evicting",policy="pool-a"} 1
vacate_drain_phase{node="a2",phase="Evacuating",policy=""} 1
vacate_drain_phase{node="b1",phase="Drained",policy=""} 1
vacate_drain_phase{node="gone",phase="Failed",policy=""} 1
vacate_drain_phase{node="new",phase="Pending",policy=""} 1
# HELP vacate_drain_start_timestamp_seconds When each NodeDrain was first admitted (status.startTime), in seconds since the epoch.
# TYPE vacate_drain_start_timestamp_seconds gauge
vacate_drain_start_timestamp_seconds{node="a1"} %[5]s
vacate_drain_start_timestamp_seconds{node="a2"} %[6]s
vacate_drain_start_timestamp_seconds{node="b1"} %[5]s
vacate_drain_start_timestamp_seconds{node="gone"} %[5]s
# HELP vacate_evacuation_heartbeat_timestamp_seconds Last sign of life of each unfinished Evacuation (neither Completed nor Cancelled, not released): its provider's last heartbeat (status.heartbeatTime), or its creation while the provider has not reported since.
# TYPE vacate_evacuation_heartbeat_timestamp_seconds gauge
vacate_evacuation_heartbeat_timestamp_seconds{evacuation="a1.db",node="a1",provider="db"} %[7]s
vacate_evacuation_heartbeat_timestamp_seconds{evacuation="a1.store",node="a1",provider="store"} %[8]s
vacate_evacuation_heartbeat_timestamp_seconds{evacuation="a2.db",node="a2",provider="db"} %[9]s
# HELP vacate_evacuation_provider_timeout_seconds How long each EvacuationProvider may go without a heartbeat on an unfinished evacuation before vacate reports it stale (spec.timeout, default 1m).
# TYPE vacate_evacuation_provider_timeout_seconds gauge
vacate_evacuation_provider_timeout_seconds{provider="db"} 60
vacate_evacuation_provider_timeout_seconds{provider="store"} 30
# HELP vacate_evacuations Evacuations by provider and phase (Pending until the provider answers the current request).
# TYPE vacate_evacuations gauge
vacate_evacuations{phase="Completed",provider="store"} 1
vacate_evacuations{phase="Failed",provider="db"} 1
vacate_evacuations{phase="InProgress",provider="store"} 1
vacate_evacuations{phase="Pending",provider="db"} 2
# HELP vacate_node_deletion_release_timestamp_seconds When timeouts.nodeDeletion lets a deleted node that the finalizer vacate.dev/drain holds go, drained or not.
# TYPE vacate_node_deletion_release_timestamp_seconds gauge
vacate_node_deletion_release_timestamp_seconds{node="a2"} %[10]s
vacate_node_deletion_release_timestamp_seconds{node="b1"} %[11]s
# HELP vacate_node_deletion_timestamp_seconds Deleted nodes that the finalizer vacate.dev/drain holds until they are drained: their deletionTimestamp.
# TYPE vacate_node_deletion_timestamp_seconds gauge
vacate_node_deletion_timestamp_seconds{node="a2"} %[12]s
vacate_node_deletion_timestamp_seconds{node="b1"} %[13]s
`,
		secs(5*time.Minute), secs(2*time.Hour), secs(40*time.Minute), secs(71*time.Minute), secs(0), secs(11*time.Minute),
		secs(6*time.Minute), secs(3*time.Minute), secs(-time.Hour), secs(40*time.Minute), secs(80*time.Minute),
		secs(10*time.Minute), secs(20*time.Minute))
}

// wantDrainPods are the drains' pods by state, as the leader reports them.
func wantDrainPods() string {
	pods := `
# HELP vacate_drain_pods Pods of each NodeDrain by state, from its status: total (must leave the node), evicted, remaining, blocked.
# TYPE vacate_drain_pods gauge
`
	for _, d := range []struct {
		node                               string
		total, evicted, remaining, blocked int
	}{{"a1", 5, 2, 3, 2}, {"a2", 1, 0, 1, 0}, {"b1", 4, 4, 0, 0}, {"gone", 0, 0, 0, 0}, {"new", 0, 0, 0, 0}} {
		pods += fmt.Sprintf("vacate_drain_pods{node=%[1]q,state=\"blocked\"} %[2]d\nvacate_drain_pods{node=%[1]q,state=\"evicted\"} %[3]d\n"+
			"vacate_drain_pods{node=%[1]q,state=\"remaining\"} %[4]d\nvacate_drain_pods{node=%[1]q,state=\"total\"} %[5]d\n",
			d.node, d.blocked, d.evicted, d.remaining, d.total)
	}
	return pods
}

// TestUnclearPolicyHoldsDeletedNodeForTheLongestBound: a deleted node two
// policies select is released, as the trigger controller does, at the
// longest timeouts.nodeDeletion of those that may govern it.
func TestUnclearPolicyHoldsDeletedNodeForTheLongestBound(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	objs := []client.Object{
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "short"}, Spec: v1alpha1.DrainPolicySpec{NodeSelector: sel,
			Timeouts: v1alpha1.Timeouts{NodeDeletion: duration(10 * time.Minute)}}},
		&v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "long"}, Spec: v1alpha1.DrainPolicySpec{NodeSelector: sel,
			Timeouts: v1alpha1.Timeouts{NodeDeletion: duration(3 * time.Hour)}}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "a1", Labels: map[string]string{"pool": "a"},
			DeletionTimestamp: at(0), Finalizers: []string{v1alpha1.FinalizerDrain}}},
	}
	c := state.New(reader(t, objs...), closed(), logr.Discard())
	want := fmt.Sprintf(`
# HELP vacate_node_deletion_release_timestamp_seconds When timeouts.nodeDeletion lets a deleted node that the finalizer vacate.dev/drain holds go, drained or not.
# TYPE vacate_node_deletion_release_timestamp_seconds gauge
vacate_node_deletion_release_timestamp_seconds{node="a1"} %s
`, secs(3*time.Hour))
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), "vacate_node_deletion_release_timestamp_seconds"); err != nil {
		t.Error(err)
	}
}

func evac(name, node, provider string, generation int64, st v1alpha1.EvacuationStatus, release *v1alpha1.EvacuationRelease) *v1alpha1.Evacuation {
	return &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: generation, CreationTimestamp: *at(-time.Hour)},
		Spec: v1alpha1.EvacuationSpec{NodeName: node, Provider: provider, Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, Release: release},
		Status: st,
	}
}
