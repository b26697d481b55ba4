package replicatedvolume

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

// AnnotationVolumes on a pod lists the volumes it uses, comma-separated;
// the replicas on its node are then in use.
const AnnotationVolumes = "volumes.example.vacate.dev/use"

// InUse are the replicas in use now: node -> volume -> true.
type InUse func(ctx context.Context) (map[string]map[string]bool, error)

// PodsInUse finds the replicas in use from the pods: a pod bound to a node
// and not finished uses its volumes' replicas there, until it is gone
// (a terminating pod still reads them).
func PodsInUse(c client.Reader) InUse {
	return func(ctx context.Context) (map[string]map[string]bool, error) {
		pods := &corev1.PodList{}
		if err := c.List(ctx, pods); err != nil {
			return nil, err
		}
		out := map[string]map[string]bool{}
		for _, p := range pods.Items {
			vols := p.Annotations[AnnotationVolumes]
			if vols == "" || p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			if out[p.Spec.NodeName] == nil {
				out[p.Spec.NodeName] = map[string]bool{}
			}
			for _, v := range strings.Split(vols, ",") {
				out[p.Spec.NodeName][strings.TrimSpace(v)] = true
			}
		}
		return out, nil
	}
}

// Mover is the BeforeEviction provider: a replica elsewhere for every
// volume on the node, before its pods go.
type Mover struct {
	Store *Store
	// Nodes are the nodes replicas may go to (ineligible ones are skipped).
	Nodes func(ctx context.Context) ([]string, error)
	InUse InUse
	// CopyDelay pauses after each copy (tests act mid-way).
	CopyDelay time.Duration
	// Budget bounds the copying done in one call; the Runner calls again.
	Budget time.Duration
}

var _ evacuation.Provider = (*Mover)(nil)

// Evacuate places and copies one more replica of each volume on node.
func (m *Mover) Evacuate(ctx context.Context, node string, _ v1alpha1.DrainMode) (evacuation.Progress, error) {
	s := m.Store
	s.mu.Lock()
	defer s.mu.Unlock()
	l, err := s.Load()
	if err != nil {
		return evacuation.Progress{}, err
	}
	if !slices.Contains(l.Ineligible, node) {
		l.Ineligible = append(l.Ineligible, node)
		if err := s.save(l); err != nil {
			return evacuation.Progress{}, err
		}
	}
	nodes, err := m.Nodes(ctx)
	if err != nil {
		return evacuation.Progress{}, err
	}
	budget := m.Budget
	if budget == 0 {
		budget = time.Second
	}
	start := time.Now()
	vols := l.onNode(node)
	remaining := 0
	for _, vol := range vols {
		v := l.Volumes[vol]
		i := slices.IndexFunc(l.Added[node], func(mv Move) bool { return mv.Volume == vol })
		if i < 0 {
			to := l.pick(v, nodes)
			if to == "" {
				return evacuation.Progress{Remaining: int64(len(vols))}, fmt.Errorf("no eligible node for another replica of %s", vol)
			}
			// The intent is recorded before the copy: after a restart the
			// same target is finished, never a second one started.
			l.Added[node] = append(l.Added[node], Move{Volume: vol, From: node, To: to})
			v.Replicas = append(v.Replicas, to)
			if err := s.save(l); err != nil {
				return evacuation.Progress{}, err
			}
			i = len(l.Added[node]) - 1
		}
		mv := l.Added[node][i]
		if s.Verify(l, mv.To, vol) {
			continue
		}
		if time.Since(start) > budget {
			remaining++
			continue
		}
		if err := copyFile(s.ReplicaPath(node, vol), s.ReplicaPath(mv.To, vol)); err != nil {
			return evacuation.Progress{Remaining: int64(remaining + 1)}, fmt.Errorf("copying %s to %s: %w", vol, mv.To, err)
		}
		if !s.Verify(l, mv.To, vol) {
			return evacuation.Progress{Remaining: int64(remaining + 1)}, fmt.Errorf("the copy of %s on %s does not match its checksum", vol, mv.To)
		}
		if m.CopyDelay > 0 {
			time.Sleep(m.CopyDelay)
		}
	}
	return evacuation.Progress{Done: remaining == 0, Remaining: int64(remaining),
		Message: fmt.Sprintf("%d of %d volume(s) on %s have an up-to-date replica on another node", len(vols)-remaining, len(vols), node)}, nil
}

// Cancel removes the replicas added for node (or, where the added one is
// now in use, the original) and makes node eligible again.
func (m *Mover) Cancel(ctx context.Context, node string) (evacuation.Progress, error) {
	s := m.Store
	s.mu.Lock()
	defer s.mu.Unlock()
	l, use, err := s.loadInUse(ctx, m.InUse)
	if err != nil {
		return evacuation.Progress{}, err
	}
	kept := 0
	for _, mv := range l.Added[node] {
		v := l.Volumes[mv.Volume]
		drop := mv.To
		switch {
		case !slices.Contains(v.Replicas, mv.From):
			continue // the original is gone already (cleaned after eviction): the new one stays
		case use[mv.To][mv.Volume] && use[mv.From][mv.Volume]:
			kept++ // both read now: keep both rather than delete one in use
			continue
		case use[mv.To][mv.Volume]:
			drop = mv.From
		}
		if err := removeReplica(s, v, drop, mv.Volume); err != nil {
			return evacuation.Progress{}, err
		}
	}
	delete(l.Added, node)
	l.Ineligible = slices.DeleteFunc(l.Ineligible, func(n string) bool { return n == node })
	if err := s.save(l); err != nil {
		return evacuation.Progress{}, err
	}
	msg := node + " is eligible again; the replicas added for its drain are removed"
	if kept > 0 {
		msg += fmt.Sprintf(" (%d kept: both copies are in use)", kept)
	}
	return evacuation.Progress{Done: true, Message: msg}, nil
}

// Cleaner is the AfterEviction provider: the node's replicas are deleted
// once its pods have left, each only when no pod uses it and its copy
// elsewhere is up to date.
type Cleaner struct {
	Store *Store
	InUse InUse
}

var _ evacuation.Provider = (*Cleaner)(nil)

// Evacuate deletes node's replicas that are no longer in use.
func (c *Cleaner) Evacuate(ctx context.Context, node string, _ v1alpha1.DrainMode) (evacuation.Progress, error) {
	s := c.Store
	s.mu.Lock()
	defer s.mu.Unlock()
	l, use, err := s.loadInUse(ctx, c.InUse)
	if err != nil {
		return evacuation.Progress{}, err
	}
	remaining := 0
	var why string
	for _, vol := range l.onNode(node) {
		v := l.Volumes[vol]
		i := slices.IndexFunc(l.Added[node], func(mv Move) bool { return mv.Volume == vol })
		switch {
		case use[node][vol]:
			remaining++
			why = "a pod still uses " + vol + " on " + node
		case i < 0 || !s.Verify(l, l.Added[node][i].To, vol):
			remaining++
			why = vol + " has no up-to-date replica elsewhere yet"
		default:
			if err := removeReplica(s, v, node, vol); err != nil {
				return evacuation.Progress{}, err
			}
		}
	}
	if remaining == 0 {
		delete(l.Added, node) // the moves are final
	}
	if err := s.save(l); err != nil {
		return evacuation.Progress{}, err
	}
	if remaining > 0 {
		return evacuation.Progress{Remaining: int64(remaining), Message: fmt.Sprintf("%d replica(s) left on %s: %s", remaining, node, why)}, nil
	}
	return evacuation.Progress{Done: true, Message: "no replica is left on " + node}, nil
}

// Cancel: deleted replicas are not brought back; the volumes keep their
// replica count on the other nodes.
func (c *Cleaner) Cancel(context.Context, string) (evacuation.Progress, error) {
	return evacuation.Progress{Done: true, Message: "nothing to undo: the volumes keep their replicas elsewhere"}, nil
}

// loadInUse reads the layout and the replicas in use now. Called with mu held.
func (s *Store) loadInUse(ctx context.Context, inUse InUse) (*Layout, map[string]map[string]bool, error) {
	l, err := s.Load()
	if err != nil {
		return nil, nil, err
	}
	use, err := inUse(ctx)
	return l, use, err
}

func removeReplica(s *Store, v *Volume, node, vol string) error {
	if err := os.Remove(s.ReplicaPath(node, vol)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	v.Replicas = slices.DeleteFunc(v.Replicas, func(n string) bool { return n == node })
	return nil
}
