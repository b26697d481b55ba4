package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// recorder watches what the benchmark measures, stamping each change with
// the time the harness received it: every PDB status, the first time each
// target node is seen cordoned, and the pods (but DaemonSet pods) on target
// nodes until they are gone.
type recorder struct {
	targets   map[string]bool
	pdbLister interface {
		List(labels.Selector) ([]*policyv1.PodDisruptionBudget, error)
	}
	stop chan struct{}

	mu       sync.Mutex
	pdbs     map[string][]pdbState
	cordoned map[string]time.Time
	pods     map[types.UID]*trackedPod
	lastGone time.Time
}

// trackedPod is a pod seen on a target node.
type trackedPod struct {
	key    string // namespace/name
	node   string
	labels map[string]string
	gone   time.Time
}

// record starts the watches and returns once their caches are filled.
func record(ctx context.Context, cs kubernetes.Interface, targets []string) (*recorder, error) {
	r := &recorder{targets: map[string]bool{}, stop: make(chan struct{}), pdbs: map[string][]pdbState{},
		cordoned: map[string]time.Time{}, pods: map[types.UID]*trackedPod{}}
	for _, t := range targets {
		r.targets[t] = true
	}
	f := informers.NewSharedInformerFactory(cs, 0)
	pdbs := f.Policy().V1().PodDisruptionBudgets()
	r.pdbLister = pdbs.Lister()
	handlers := []struct {
		inf cache.SharedIndexInformer
		fn  func(obj any, gone bool)
	}{
		{pdbs.Informer(), r.onPDB},
		{f.Core().V1().Nodes().Informer(), r.onNode},
		{f.Core().V1().Pods().Informer(), r.onPod},
	}
	var regs []cache.ResourceEventHandlerRegistration
	for _, h := range handlers {
		fn := h.fn
		reg, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { fn(o, false) },
			UpdateFunc: func(_, o any) { fn(o, false) },
			DeleteFunc: func(o any) {
				if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
					o = d.Obj
				}
				fn(o, true)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("watching: %w", err)
		}
		regs = append(regs, reg)
	}
	f.Start(r.stop)
	synced := make([]cache.InformerSynced, len(regs))
	for i, reg := range regs {
		synced[i] = reg.HasSynced // the handlers saw every object listed
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		close(r.stop)
		return nil, fmt.Errorf("watching PDBs, nodes and pods: caches never synced")
	}
	return r, nil
}

func (r *recorder) close() { close(r.stop) }

func (r *recorder) onPDB(obj any, gone bool) {
	p, ok := obj.(*policyv1.PodDisruptionBudget)
	if !ok || gone {
		return
	}
	s := pdbState{at: time.Now(), allowed: p.Status.DisruptionsAllowed, healthy: p.Status.CurrentHealthy,
		desired: p.Status.DesiredHealthy, expected: p.Status.ExpectedPods}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := p.Namespace + "/" + p.Name
	r.pdbs[key] = append(r.pdbs[key], s)
}

func (r *recorder) onNode(obj any, _ bool) {
	n, ok := obj.(*corev1.Node)
	if !ok || !n.Spec.Unschedulable || !r.targets[n.Name] {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.cordoned[n.Name]; !seen {
		r.cordoned[n.Name] = time.Now()
	}
}

func (r *recorder) onPod(obj any, gone bool) {
	p, ok := obj.(*corev1.Pod)
	if !ok || !r.targets[p.Spec.NodeName] || daemonSetPod(p) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	t, seen := r.pods[p.UID]
	if !seen {
		t = &trackedPod{key: p.Namespace + "/" + p.Name, node: p.Spec.NodeName, labels: p.Labels}
		r.pods[p.UID] = t
	}
	if gone && t.gone.IsZero() {
		t.gone = now
		if now.After(r.lastGone) {
			r.lastGone = now
		}
	}
}

func daemonSetPod(p *corev1.Pod) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == "DaemonSet"
}

// remaining counts the tracked pods not yet gone.
func (r *recorder) remaining() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, t := range r.pods {
		if t.gone.IsZero() {
			n++
		}
	}
	return n
}

// waitEmpty waits until no tracked pod remains and returns when the last
// one went.
func (r *recorder) waitEmpty(ctx context.Context, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for r.remaining() > 0 {
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%d pods still on the drained nodes after %s", r.remaining(), timeout)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastGone, nil
}

// initial returns the pods on target nodes now, each with the PDBs that
// select it.
func (r *recorder) initial() ([]waiter, error) {
	pdbs, err := r.pdbLister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []waiter
	for _, t := range r.pods {
		if !t.gone.IsZero() {
			continue
		}
		w := waiter{pod: t.key}
		ns := strings.SplitN(t.key, "/", 2)[0]
		for _, p := range pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && p.Namespace == ns && sel.Matches(labels.Set(t.labels)) {
				w.pdbs = append(w.pdbs, p.Namespace+"/"+p.Name)
			}
		}
		out = append(out, w)
	}
	return out, nil
}

// snapshot returns copies of the PDB states and cordon times seen so far.
func (r *recorder) snapshot() (map[string][]pdbState, map[string]time.Time, map[string]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	states := map[string][]pdbState{}
	for k, v := range r.pdbs {
		states[k] = append([]pdbState(nil), v...)
	}
	cordoned := map[string]time.Time{}
	for k, v := range r.cordoned {
		cordoned[k] = v
	}
	nodeOf := map[string]string{}
	for _, t := range r.pods {
		nodeOf[t.key] = t.node
	}
	return states, cordoned, nodeOf
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times; it is 100 on every Linux architecture Go supports.
const clockTicks = 100

// cpuSeconds reads a live process's user and system CPU time.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return 0, fmt.Errorf("reading CPU time: %w", err)
	}
	return parseStatCPU(string(b))
}

// parseStatCPU reads utime and stime (fields 14 and 15) of a
// /proc/<pid>/stat line; the command name (field 2) may hold spaces, so
// fields are counted after its closing parenthesis.
func parseStatCPU(stat string) (float64, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("malformed stat %q", stat)
	}
	return float64(u+s) / clockTicks, nil
}

// peakRSS reads a live process's peak resident set (VmHWM) in kB: over its
// life, or since resetPeakRSS.
func peakRSS(pid int) (int64, error) { return statusKB(pid, "VmHWM") }

// currentRSS reads a live process's resident set now (VmRSS) in kB.
func currentRSS(pid int) (int64, error) { return statusKB(pid, "VmRSS") }

// resetPeakRSS sets a live process's VmHWM to its resident set now (Linux
// 4.0 on: "5" written to /proc/<pid>/clear_refs), so that a later peakRSS is
// the peak since this moment.
func resetPeakRSS(pid int) error {
	if err := os.WriteFile(filepath.Join("/proc", strconv.Itoa(pid), "clear_refs"), []byte("5"), 0); err != nil {
		return fmt.Errorf("resetting peak RSS: %w", err)
	}
	return nil
}

// statusKB reads a field in kB ("VmHWM") of /proc/<pid>/status.
func statusKB(pid int, field string) (int64, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", field, err)
	}
	defer f.Close()
	return parseStatusKB(f, field)
}

// parseStatusKB finds "field:   123 kB" in a /proc/<pid>/status text.
func parseStatusKB(r io.Reader, field string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in the process status", field)
}
