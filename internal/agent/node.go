package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// taint keeps v1alpha1.TaintNotice on the node while any notice is
// current, with the most urgent notice's source as its value, and removes
// it when none is. The taint is the agent's alone, so removing it never
// undoes anyone else's.
func (a *Agent) taint(ctx context.Context, w wanted) error {
	value := urgentSource(w)
	node, err := a.nodeOf(ctx)
	if err != nil {
		return err
	}
	before := node.DeepCopy()
	kept := node.Spec.Taints[:0:0]
	found := false
	for _, t := range node.Spec.Taints {
		if t.Key != v1alpha1.TaintNotice {
			kept = append(kept, t)
			continue
		}
		if value != "" && !found && t.Value == value && t.Effect == corev1.TaintEffectNoSchedule {
			kept, found = append(kept, t), true
		}
	}
	if value != "" && !found {
		kept = append(kept, corev1.Taint{Key: v1alpha1.TaintNotice, Value: value, Effect: corev1.TaintEffectNoSchedule,
			TimeAdded: &metav1.Time{Time: a.opts.Now()}})
	}
	if equality.Semantic.DeepEqual(kept, node.Spec.Taints) {
		return nil
	}
	node.Spec.Taints = kept
	if value != "" {
		a.opts.Log.Info("tainting the node", "taint", v1alpha1.TaintNotice+"="+value+":NoSchedule")
	} else {
		a.opts.Log.Info("removing the node's taint", "taint", v1alpha1.TaintNotice)
	}
	if err := a.opts.Client.Patch(ctx, node, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
		return fmt.Errorf("setting taint %s on node %s: %w", v1alpha1.TaintNotice, node.Name, err)
	}
	return nil
}

// urgentSource is the source of the notice with the earliest deadline (one
// without a deadline after those with one, then by name), or "" when there
// is no notice.
func urgentSource(w wanted) string {
	var all []Notice
	for _, r := range w.requesters {
		all = append(all, r.notices...)
	}
	all = append(all, w.cordon...)
	if len(all) == 0 {
		return ""
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Deadline.IsZero() != b.Deadline.IsZero() {
			return !a.Deadline.IsZero()
		}
		if !a.Deadline.Equal(b.Deadline) {
			return a.Deadline.Before(b.Deadline)
		}
		return a.Source < b.Source
	})
	return all[0].Source
}

// condition keeps the node's VacateAgent condition: False with the first
// problem while a source has one, else True saying what the agent does.
// It writes only when the condition changes.
func (a *Agent) condition(ctx context.Context, w wanted) error {
	want := corev1.NodeCondition{Type: ConditionType, Status: corev1.ConditionTrue, Reason: ReasonWatching}
	names := make([]string, 0, len(a.opts.Sources))
	for _, s := range a.opts.Sources {
		names = append(names, s.Name())
	}
	want.Message = "vacate-agent watches " + strings.Join(names, ", ") + "; no notice"
	if len(w.requesters) > 0 || len(w.cordon) > 0 {
		want.Reason = ReasonNotice
		var parts []string
		for _, name := range sortedKeys(w.requesters) {
			r := w.requesters[name]
			part := "drain requested by " + name + " (" + r.requester.Reason + ")"
			if r.requester.Deadline != nil {
				part += ", deadline " + r.requester.Deadline.UTC().Format("2006-01-02T15:04:05Z")
			}
			parts = append(parts, part)
		}
		for _, n := range w.cordon {
			parts = append(parts, "tainted only, for "+n.Source+" ("+n.Reason+")")
		}
		want.Message = strings.Join(parts, "; ")
	}
	if len(w.problems) > 0 {
		want.Status, want.Reason = corev1.ConditionFalse, w.problems[0].Reason
		parts := make([]string, 0, len(w.problems))
		for _, p := range w.problems {
			parts = append(parts, p.Source+": "+p.Message)
		}
		want.Message = strings.Join(parts, "; ") + "; " + want.Message
	}
	want.Message = truncate(want.Message, 1024)
	node, err := a.nodeOf(ctx)
	if err != nil {
		return err
	}
	before := node.DeepCopy()
	now := metav1.Time{Time: a.opts.Now()}
	i := conditionIndex(node.Status.Conditions, ConditionType)
	if i >= 0 {
		have := node.Status.Conditions[i]
		if have.Status == want.Status && have.Reason == want.Reason && have.Message == want.Message {
			return nil
		}
		want.LastTransitionTime = have.LastTransitionTime
		if have.Status != want.Status {
			want.LastTransitionTime = now
		}
		want.LastHeartbeatTime = now
		node.Status.Conditions[i] = want
	} else {
		want.LastTransitionTime, want.LastHeartbeatTime = now, now
		node.Status.Conditions = append(node.Status.Conditions, want)
	}
	if want.Status == corev1.ConditionFalse {
		a.opts.Log.Info("a source has a problem", "reason", want.Reason, "message", want.Message)
	}
	// A strategic merge patch changes this condition only (conditions merge
	// by type), never the kubelet's.
	if err := a.opts.Client.Status().Patch(ctx, node, client.StrategicMergeFrom(before)); err != nil {
		return fmt.Errorf("setting condition %s on node %s: %w", ConditionType, node.Name, err)
	}
	return nil
}

func conditionIndex(cs []corev1.NodeCondition, t corev1.NodeConditionType) int {
	for i, c := range cs {
		if c.Type == t {
			return i
		}
	}
	return -1
}
