package demo

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	rv "github.com/vacate-dev/vacate/examples/replicated-volume"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/operator"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

const (
	brokerPort     = 7070
	brokerMessages = 3000
	volumeCount    = 6
	volumeProvider = "ledger-volumes"
)

// stateful is the demo's data: three brokers (real processes on their pods'
// IPs) holding messages, and a ledger app on replicated volumes whose
// providers run in the demo.
type stateful struct {
	brokers    map[string]string // pod -> base URL
	procs      []*exec.Cmd
	store      *rv.Store
	volumeNode string
	stop       func()
}

// startStateful puts a broker on brokerNode (its StatefulSet's other two on
// other nodes) and the ledger's volumes on volumeNode.
func (d *demo) startStateful(ctx context.Context, brokerNode, volumeNode string, others []string) (*stateful, error) {
	s := &stateful{brokers: map[string]string{}, volumeNode: volumeNode, store: &rv.Store{Root: filepath.Join(d.c.Dir, "volumes")}}
	// The cluster's directory outlives a run: start from empty data.
	for _, dir := range []string{s.store.Root, filepath.Join(d.c.Dir, "brokers")} {
		if err := os.RemoveAll(dir); err != nil {
			return s, fmt.Errorf("clearing the data of an earlier demo: %w", err)
		}
	}
	d.step("creating StatefulSet broker (3, each a real broker process on its pod's IP, with the HTTP evacuation hook) "+
		"holding %d messages, one replica on %s", brokerMessages, brokerNode)
	if err := d.brokers(ctx, s, append([]string{brokerNode}, others[:2]...)); err != nil {
		return s, err
	}
	d.step("creating Deployment ledger on %s, on %d replicated volumes (EvacuationProviders %s and %s-cleanup, run by the demo)",
		volumeNode, volumeCount, volumeProvider, volumeProvider)
	if err := d.volumes(ctx, s, others); err != nil {
		return s, err
	}
	return s, nil
}

func (d *demo) brokers(ctx context.Context, s *stateful, nodes []string) error {
	cs := d.c.Client
	sts := devcluster.StatefulSet(ns, "broker", 3)
	sts.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(brokerPort)}
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "broker"}}
	sts.Spec.Template.Spec.Affinity = &corev1.Affinity{
		NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: devcluster.HostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: nodes}}}}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: sel, TopologyKey: devcluster.HostnameLabel}}},
	}
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	if _, err := cs.CoreV1().Services(ns).Create(ctx, devcluster.HeadlessService(ns, "broker"), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service broker: %w", err)
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating StatefulSet broker: %w", err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, cs, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "broker"}), 3, 2*time.Minute)
	if err != nil {
		return err
	}
	for _, p := range pods {
		s.brokers[p.Name] = fmt.Sprintf("http://%s:%d", p.Status.PodIP, brokerPort)
	}
	exe, err := d.executable()
	if err != nil {
		return err
	}
	for _, p := range pods {
		var peers []string
		for name, url := range s.brokers {
			if name != p.Name {
				peers = append(peers, url)
			}
		}
		logPath := filepath.Join(d.c.Dir, p.Name+".log")
		log, err := os.Create(logPath)
		if err != nil {
			return err
		}
		cmd := exec.Command(exe, "broker", "--name", p.Name, "--listen", fmt.Sprintf("%s:%d", p.Status.PodIP, brokerPort),
			"--data", filepath.Join(d.c.Dir, "brokers", p.Name), "--peers", strings.Join(peers, ","), "--no-fsync", "--forward-delay", "1ms")
		cmd.Stdout, cmd.Stderr = log, log
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			log.Close()
			return fmt.Errorf("starting broker %s: %w", p.Name, err)
		}
		log.Close()
		s.procs = append(s.procs, cmd)
		if d.opts.Keep {
			if err := devcluster.Attach(d.c.Dir, devcluster.ComponentState{Name: p.Name, PID: cmd.Process.Pid, Binary: exe, Log: logPath}); err != nil {
				return err
			}
		}
	}
	// Publish, round robin, once every broker answers.
	for i := range brokerMessages {
		url := s.brokers[fmt.Sprintf("broker-%d", i%3)]
		var err error
		for try := 0; try < 100; try++ {
			var resp *http.Response
			if resp, err = http.Post(url+"/publish", "text/plain", strings.NewReader(fmt.Sprintf("order %d", i))); err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					err = fmt.Errorf("publish to %s: HTTP %d", url, resp.StatusCode)
				}
			}
			if err == nil {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (d *demo) volumes(ctx context.Context, s *stateful, others []string) error {
	var names []string
	for i := range volumeCount {
		b := make([]byte, 64<<10)
		_, _ = rand.Read(b)
		name := fmt.Sprintf("ledger-%d", i)
		on := []string{s.volumeNode}
		if i%2 == 1 {
			on = append(on, others[i%len(others)])
		}
		if err := s.store.Create(name, b, on...); err != nil {
			return err
		}
		names = append(names, name)
	}
	dep := devcluster.Deployment(ns, "ledger", 1)
	dep.Spec.Template.Annotations = map[string]string{rv.AnnotationVolumes: strings.Join(names, ",")}
	dep.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: s.volumeNode}
	if _, err := d.c.Client.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Deployment ledger: %w", err)
	}
	if _, err := devcluster.WaitForPodsReady(ctx, d.c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: "ledger"}), 1, time.Minute); err != nil {
		return err
	}
	podSel := metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: "ledger"}}
	// The providers run in this process, as the demo's user: they name it
	// as their reporter, so nobody else may complete their Evacuations.
	self, err := d.c.Client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("reading the demo's own user name: %w", err)
	}
	reporter := &v1alpha1.ProviderReporter{User: self.Status.UserInfo.Username}
	for name, stage := range map[string]v1alpha1.EvacuationStage{volumeProvider: v1alpha1.StageBeforeEviction, volumeProvider + "-cleanup": v1alpha1.StageAfterEviction} {
		spec := v1alpha1.EvacuationProviderSpec{PodSelector: podSel, Stage: stage, Reporter: reporter}
		if err := evacuation.Register(ctx, d.cl, name, spec); err != nil {
			return err
		}
	}
	scheme, err := operator.Scheme()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(d.c.RESTConfig, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)}}) // a second demo in one process (tests)
	if err != nil {
		return err
	}
	nodes := func(ctx context.Context) ([]string, error) {
		list := &corev1.NodeList{}
		if err := mgr.GetClient().List(ctx, list); err != nil {
			return nil, err
		}
		var out []string
		for _, n := range list.Items {
			if !n.Spec.Unschedulable {
				out = append(out, n.Name)
			}
		}
		return out, nil
	}
	inUse := rv.PodsInUse(mgr.GetClient())
	for name, p := range map[string]evacuation.Provider{
		volumeProvider:              &rv.Mover{Store: s.store, InUse: inUse, Nodes: nodes, CopyDelay: 400 * time.Millisecond, Budget: 200 * time.Millisecond},
		volumeProvider + "-cleanup": &rv.Cleaner{Store: s.store, InUse: inUse},
	} {
		r := &evacuation.Runner{Client: mgr.GetClient(), Name: name, Provider: p, Heartbeat: 300 * time.Millisecond}
		if err := r.SetupWithManager(mgr); err != nil {
			return err
		}
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	s.stop = func() { cancel(); <-done }
	return nil
}

// report says where the data went, after the drains.
func (d *demo) reportStateful(ctx context.Context, s *stateful) error {
	var parts []string
	total, emptied := 0, false
	for _, name := range []string{"broker-0", "broker-1", "broker-2"} {
		var st struct{ Stored int }
		resp, err := http.Get(s.brokers[name] + "/stats")
		if err != nil {
			parts = append(parts, name+": not answering")
			continue
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		parts = append(parts, fmt.Sprintf("%s holds %d", name, st.Stored))
		total += st.Stored
		emptied = emptied || st.Stored == 0
	}
	d.step("messages after the drains: %s (%d published)", strings.Join(parts, ", "), brokerMessages)
	if total != brokerMessages || !emptied {
		return fmt.Errorf("the brokers hold %d messages, %d were published, and the drained one should hold none", total, brokerMessages)
	}
	l, err := s.store.Load()
	if err != nil {
		return err
	}
	good, on := 0, 0
	for name, v := range l.Volumes {
		if slices.Contains(v.Replicas, s.volumeNode) {
			on++
		}
		ok := len(v.Replicas) > 0
		for _, n := range v.Replicas {
			ok = ok && s.store.Verify(l, n, name)
		}
		if ok {
			good++
		}
	}
	d.step("volumes after the drains: %d of %d with every replica's checksum right, %d still on %s", good, len(l.Volumes), on, s.volumeNode)
	if on > 0 || good != len(l.Volumes) {
		return fmt.Errorf("the ledger's volumes did not leave %s intact", s.volumeNode)
	}
	return nil
}

// close stops what the demo runs for its data. With --keep the brokers stay
// (attached to the cluster); the volume providers stop with the demo, so
// their Evacuations and registrations go too, and cancelling a kept drain
// later does not wait for a provider that is gone.
func (d *demo) closeStateful(ctx context.Context, s *stateful) {
	if s == nil {
		return
	}
	if s.stop != nil {
		s.stop()
	}
	if d.opts.Keep {
		_ = d.cl.DeleteAllOf(ctx, &v1alpha1.Evacuation{})
		_ = d.cl.DeleteAllOf(ctx, &v1alpha1.EvacuationProvider{})
		return
	}
	for _, p := range s.procs {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// executable is the program the demo runs its helper processes with.
func (d *demo) executable() (string, error) {
	exe := d.opts.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return "", fmt.Errorf("finding this program: %w", err)
		}
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved // as /proc/<pid>/exe names it, which Down checks
	}
	return exe, nil
}
