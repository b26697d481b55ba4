// Package state reports what vacate's objects say now, read from the
// controller's informer cache at each scrape, as kube-state-metrics does for
// Kubernetes' own kinds: each drain's phase, pods, start, when it became
// Blocked and when it runs out of time; evacuations by provider and phase
// and when each unfinished one last showed a sign of life; deleted nodes
// that the finalizer vacate.dev/drain holds and when timeouts.nodeDeletion
// lets them go; and whether this replica leads.
//
// Nothing is kept between scrapes, so the figures are right after a restart
// or a leader change. Only the leader reports the objects (a standby reports
// vacate_controller_leader 0 and nothing else), so two replicas never count
// a drain twice; dashboards and alerts still aggregate with max by the
// object's labels, which also covers the seconds of a leader change in
// which an old leader's last scrape and the new one's overlap.
package state

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/metrics"
	"github.com/vacate-dev/vacate/internal/policy"
)

// Pod states of vacate_drain_pods: the counts of a NodeDrain's status.
const (
	PodsTotal     = "total"
	PodsEvicted   = "evicted"
	PodsRemaining = "remaining"
	PodsBlocked   = "blocked"
)

// listTimeout bounds each read of the cache in a scrape. Reads of a synced
// informer answer at once; the bound only matters if an informer were
// missing and had to start.
const listTimeout = 10 * time.Second

var (
	leaderDesc = prometheus.NewDesc("vacate_controller_leader",
		"1 if this replica leads (runs the controllers and reports the state metrics), 0 while it waits for the Lease.", nil, nil)

	drainPhaseDesc = prometheus.NewDesc("vacate_drain_phase",
		"1 for each NodeDrain, by node, its status.phase (Pending until it has one) and its DrainPolicy (status.policy; empty: the built-in defaults).",
		[]string{metrics.LabelNode, metrics.LabelPhase, metrics.LabelPolicy}, nil)
	drainPodsDesc = prometheus.NewDesc("vacate_drain_pods",
		"Pods of each NodeDrain by state, from its status: total (must leave the node), evicted, remaining, blocked.",
		[]string{metrics.LabelNode, metrics.LabelState}, nil)
	drainStartDesc = prometheus.NewDesc("vacate_drain_start_timestamp_seconds",
		"When each NodeDrain was first admitted (status.startTime), in seconds since the epoch.",
		[]string{metrics.LabelNode}, nil)
	drainBlockedDesc = prometheus.NewDesc("vacate_drain_blocked_since_timestamp_seconds",
		"When each NodeDrain's Blocked condition became True, while it is True, by the condition's reason (PodsBlocked, DrainTimeout, DeadlinePassed, EvacuationTimedOut, ...).",
		[]string{metrics.LabelNode, metrics.LabelReason}, nil)
	drainDeadlineDesc = prometheus.NewDesc("vacate_drain_deadline_timestamp_seconds",
		"When each NodeDrain that is neither Drained nor undone runs out of time: the earlier of its start plus its DrainPolicy's timeouts.drain and its requesters' earliest deadline (status.deadline); absent when neither applies.",
		[]string{metrics.LabelNode}, nil)

	evacuationsDesc = prometheus.NewDesc("vacate_evacuations",
		"Evacuations by provider and phase (Pending until the provider answers the current request).",
		[]string{metrics.LabelProvider, metrics.LabelPhase}, nil)
	evacuationHeartbeatDesc = prometheus.NewDesc("vacate_evacuation_heartbeat_timestamp_seconds",
		"Last sign of life of each unfinished Evacuation (neither Completed nor Cancelled, not released): its provider's last heartbeat (status.heartbeatTime), or its creation while the provider has not reported since.",
		[]string{metrics.LabelEvacuation, metrics.LabelNode, metrics.LabelProvider}, nil)
	providerTimeoutDesc = prometheus.NewDesc("vacate_evacuation_provider_timeout_seconds",
		"How long each EvacuationProvider may go without a heartbeat on an unfinished evacuation before vacate reports it stale (spec.timeout, default 1m).",
		[]string{metrics.LabelProvider}, nil)

	nodeDeletionDesc = prometheus.NewDesc("vacate_node_deletion_timestamp_seconds",
		"Deleted nodes that the finalizer vacate.dev/drain holds until they are drained: their deletionTimestamp.",
		[]string{metrics.LabelNode}, nil)
	nodeReleaseDesc = prometheus.NewDesc("vacate_node_deletion_release_timestamp_seconds",
		"When timeouts.nodeDeletion lets a deleted node that the finalizer vacate.dev/drain holds go, drained or not.",
		[]string{metrics.LabelNode}, nil)
)

// Collector is a prometheus.Collector of vacate's state, read from reader
// (the manager's cache) at each scrape.
type Collector struct {
	reader  client.Reader
	elected <-chan struct{}
	log     logr.Logger
}

// New returns a Collector that reads from reader and reports the objects
// once elected is closed (the manager's Elected: at once without leader
// election).
func New(reader client.Reader, elected <-chan struct{}, log logr.Logger) *Collector {
	return &Collector{reader: reader, elected: elected, log: log}
}

var _ prometheus.Collector = (*Collector)(nil)

// Describe sends every metric the collector may report.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaderDesc, drainPhaseDesc, drainPodsDesc, drainStartDesc, drainBlockedDesc,
		drainDeadlineDesc, evacuationsDesc, evacuationHeartbeatDesc, providerTimeoutDesc, nodeDeletionDesc, nodeReleaseDesc} {
		ch <- d
	}
}

// Collect reads the cache and reports what it holds now. A read that fails
// leaves its metrics out of this scrape (and is logged) rather than failing
// the whole scrape.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if !c.leading() {
		ch <- gauge(leaderDesc, 0)
		return
	}
	ch <- gauge(leaderDesc, 1)
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	nodes := &corev1.NodeList{}
	policies := &v1alpha1.DrainPolicyList{}
	nodesRead := c.list(ctx, nodes) && c.list(ctx, policies)
	if nodesRead {
		collectDeletedNodes(ch, nodes.Items, policies.Items)
	}
	drains := &v1alpha1.NodeDrainList{}
	if c.list(ctx, drains) {
		var byName map[string]*corev1.Node
		if nodesRead {
			byName = make(map[string]*corev1.Node, len(nodes.Items))
			for i := range nodes.Items {
				byName[nodes.Items[i].Name] = &nodes.Items[i]
			}
		}
		r := &resolver{nodes: byName, policies: policies.Items, timeouts: map[string]time.Duration{}, read: nodesRead}
		for i := range drains.Items {
			collectDrain(ch, &drains.Items[i], r)
		}
	}
	evacuations := &v1alpha1.EvacuationList{}
	if c.list(ctx, evacuations) {
		collectEvacuations(ch, evacuations.Items)
	}
	providers := &v1alpha1.EvacuationProviderList{}
	if c.list(ctx, providers) {
		for i := range providers.Items {
			p := &providers.Items[i]
			timeout := v1alpha1.DefaultProviderTimeout
			if p.Spec.Timeout != nil {
				timeout = p.Spec.Timeout.Duration
			}
			ch <- gauge(providerTimeoutDesc, timeout.Seconds(), p.Name)
		}
	}
}

func (c *Collector) leading() bool {
	select {
	case <-c.elected:
		return true
	default:
		return false
	}
}

// list reads one kind from the cache, without copying: the collector only
// reads the objects.
func (c *Collector) list(ctx context.Context, l client.ObjectList) bool {
	if err := c.reader.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
		c.log.Error(err, "reading the cache for the state metrics; leaving them out of this scrape", "kind", kindOf(l))
		return false
	}
	return true
}

func kindOf(l client.ObjectList) string {
	switch l.(type) {
	case *corev1.NodeList:
		return "Node"
	case *v1alpha1.DrainPolicyList:
		return "DrainPolicy"
	case *v1alpha1.NodeDrainList:
		return "NodeDrain"
	case *v1alpha1.EvacuationList:
		return "Evacuation"
	case *v1alpha1.EvacuationProviderList:
		return "EvacuationProvider"
	}
	return "unknown"
}

// collectDrain reports one NodeDrain.
func collectDrain(ch chan<- prometheus.Metric, nd *v1alpha1.NodeDrain, r *resolver) {
	node := nd.Spec.NodeName
	phase := nd.Status.Phase
	if phase == "" {
		phase = v1alpha1.PhasePending
	}
	ch <- gauge(drainPhaseDesc, 1, node, string(phase), nd.Status.Policy)
	st := nd.Status
	for state, n := range map[string]int32{PodsTotal: st.Total, PodsEvicted: st.Evicted, PodsRemaining: st.Remaining, PodsBlocked: st.Blocked} {
		ch <- gauge(drainPodsDesc, float64(n), node, state)
	}
	if st.StartTime != nil {
		ch <- gauge(drainStartDesc, seconds(st.StartTime.Time), node)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionBlocked); c != nil && c.Status == metav1.ConditionTrue {
		ch <- gauge(drainBlockedDesc, seconds(c.LastTransitionTime.Time), node, c.Reason)
	}
	if deadline, ok := r.deadline(nd); ok {
		ch <- gauge(drainDeadlineDesc, seconds(deadline), node)
	}
}

// resolver finds a drain's deadline, resolving each DrainPolicy once per
// scrape.
type resolver struct {
	nodes    map[string]*corev1.Node
	policies []v1alpha1.DrainPolicy
	// timeouts are the resolved timeouts.drain by policy name.
	timeouts map[string]time.Duration
	// read: nodes and policies could be read in this scrape.
	read bool
}

// deadline is when a drain that is neither Drained nor being undone runs
// out of time, as the NodeDrain controller judges it (overdue): its
// requesters' deadline, or its start plus timeouts.drain, whichever comes
// first. A Failed drain keeps its deadline: it failed because it passed
// it, or it will never meet it.
func (r *resolver) deadline(nd *v1alpha1.NodeDrain) (time.Time, bool) {
	st := nd.Status
	if !nd.Requested() ||
		st.Phase == v1alpha1.PhaseDrained || st.Phase == v1alpha1.PhaseRestoring {
		return time.Time{}, false
	}
	var out time.Time
	if st.Deadline != nil {
		out = st.Deadline.Time.Time
	}
	if st.StartTime != nil {
		if timeout := r.drainTimeout(nd); timeout > 0 {
			if end := st.StartTime.Add(timeout); out.IsZero() || end.Before(out) {
				out = end
			}
		}
	}
	return out, !out.IsZero()
}

// drainTimeout is the timeouts.drain of the drain's policy, chosen as the
// NodeDrain controller does (policy.Resolve): spec.policyName, else the
// policy that selects the node. 0 when there is none or the policy cannot
// be resolved (the drain then waits and has no timeout).
func (r *resolver) drainTimeout(nd *v1alpha1.NodeDrain) time.Duration {
	if !r.read {
		return 0
	}
	var dp *v1alpha1.DrainPolicy
	if name := nd.Spec.PolicyName; name != "" {
		for i := range r.policies {
			if r.policies[i].Name == name {
				dp = &r.policies[i]
			}
		}
	} else {
		var labels map[string]string
		if n := r.nodes[nd.Spec.NodeName]; n != nil {
			labels = n.Labels
		}
		var err error
		if dp, _, err = policy.Select(labels, r.policies); err != nil {
			return 0
		}
	}
	if dp == nil {
		return 0 // not found, or built-in defaults: no timeouts.drain
	}
	if t, ok := r.timeouts[dp.Name]; ok {
		return t
	}
	p, err := policy.FromSpec(dp.Name, dp.Spec)
	if err != nil {
		p.DrainTimeout = 0
	}
	r.timeouts[dp.Name] = p.DrainTimeout
	return p.DrainTimeout
}

// collectDeletedNodes reports the deleted nodes that the finalizer
// vacate.dev/drain holds, and when timeouts.nodeDeletion releases each, as
// the trigger controller computes it: the policy that selects the node,
// or, when that is unclear, the longest bound of those that may.
func collectDeletedNodes(ch chan<- prometheus.Metric, nodes []corev1.Node, policies []v1alpha1.DrainPolicy) {
	for i := range nodes {
		n := &nodes[i]
		if n.DeletionTimestamp.IsZero() || !controllerutil.ContainsFinalizer(n, v1alpha1.FinalizerDrain) {
			continue
		}
		bound := policy.DefaultNodeDeletion
		dp, _, err := policy.Select(n.Labels, policies)
		var p policy.Policy
		if err == nil && dp != nil {
			p, err = policy.FromSpec(dp.Name, dp.Spec)
			bound = p.NodeDeletion
		}
		if err != nil {
			bound = policy.LongestNodeDeletion(n.Labels, policies)
		}
		ch <- gauge(nodeDeletionDesc, seconds(n.DeletionTimestamp.Time), n.Name)
		ch <- gauge(nodeReleaseDesc, seconds(n.DeletionTimestamp.Add(bound)), n.Name)
	}
}

// collectEvacuations reports evacuations by provider and phase, and the
// last sign of life of each unfinished one.
func collectEvacuations(ch chan<- prometheus.Metric, evs []v1alpha1.Evacuation) {
	type key struct{ provider, phase string }
	counts := map[key]int{}
	for i := range evs {
		ev := &evs[i]
		phase := ev.CurrentPhase()
		counts[key{ev.Spec.Provider, string(phase)}]++
		if phase == v1alpha1.EvacuationCompleted || phase == v1alpha1.EvacuationCancelled ||
			ev.Spec.Release != nil || !ev.DeletionTimestamp.IsZero() {
			continue
		}
		last := ev.CreationTimestamp.Time
		if hb := ev.Status.HeartbeatTime; hb != nil && hb.After(last) {
			last = hb.Time
		}
		ch <- gauge(evacuationHeartbeatDesc, seconds(last), ev.Name, ev.Spec.NodeName, ev.Spec.Provider)
	}
	for k, n := range counts {
		ch <- gauge(evacuationsDesc, float64(n), k.provider, k.phase)
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

// seconds is t in seconds since the epoch, to the millisecond.
func seconds(t time.Time) float64 { return float64(t.UnixMilli()) / 1e3 }
