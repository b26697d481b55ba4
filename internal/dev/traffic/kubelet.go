package traffic

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// KubeletLabel marks the pods a Kubelet serves. kwok's pod-delete stage in
// the dev cluster skips them, so that such a pod stays Terminating until
// the Kubelet has stopped its process, as with a real kubelet; without it
// kwok would delete the pod the moment it is deleted, and its server would
// outlive it.
const KubeletLabel = devcluster.OwnKubeletLabel

// KubeletOptions configure a Kubelet.
type KubeletOptions struct {
	// Port the servers listen on, on their pod's IP. Default 8080.
	Port int
	// PreStopSleep is how long a server keeps serving after SIGTERM, as a
	// preStop sleep hook would keep it. Zero is the worst case: the
	// listener closes at once.
	PreStopSleep time.Duration
	// Selector, when set, narrows the pods served to those it matches (on
	// top of KubeletLabel), so that two Kubelets can share a namespace.
	Selector labels.Selector
	// Spares is how many server processes are kept started ahead of the
	// pods that will need them. Default 2. A server of a -race binary takes
	// about half a second to start, and kwok marks a pod Ready at once:
	// raise it when many pods start together (a drain of a full node), or
	// the last of them may refuse their first requests.
	Spares int
}

// Kubelet stands in for the kubelets of simulated nodes, for the pods
// labelled KubeletLabel in one namespace: it runs a server process per pod
// on the pod's IP, and when the pod is deleted stops that process (SIGTERM,
// then SIGKILL when the pod's grace period ends) before it deletes the
// pod for good. What happens to requests between those moments is what
// endpoint-aware eviction is about.
type Kubelet struct {
	cs        kubernetes.Interface
	net       *Network
	namespace string
	opts      KubeletOptions
	ctx       context.Context
	cancel    context.CancelFunc
	factory   informers.SharedInformerFactory
	running   atomic.Int64
	spares    chan *Server

	mu       sync.Mutex
	stopped  bool
	workers  map[types.UID]*podWorker
	finished map[types.UID]bool // pods whose worker is done
	errs     []string
	wg       sync.WaitGroup
}

// maxErrors bounds the error messages kept, so a broken run does not grow
// without end.
const maxErrors = 20

// StartKubelet starts a Kubelet for the pods of namespace and returns once
// it has seen them all. Stop it with Stop.
func StartKubelet(ctx context.Context, cs kubernetes.Interface, n *Network, namespace string, opts KubeletOptions) (*Kubelet, error) {
	if opts.Port == 0 {
		opts.Port = 8080
	}
	if opts.Spares <= 0 {
		opts.Spares = 2
	}
	own, err := labels.NewRequirement(KubeletLabel, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet stand-in: %w", err)
	}
	sel := labels.NewSelector().Add(*own)
	if opts.Selector != nil {
		reqs, _ := opts.Selector.Requirements()
		sel = sel.Add(reqs...)
	}
	kctx, cancel := context.WithCancel(ctx)
	k := &Kubelet{
		cs: cs, net: n, namespace: namespace, opts: opts, ctx: kctx, cancel: cancel,
		workers: map[types.UID]*podWorker{}, finished: map[types.UID]bool{},
		spares: make(chan *Server, opts.Spares),
	}
	k.wg.Add(1)
	go k.keepSpares()
	k.factory = informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	inf := k.factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(obj, false) },
		UpdateFunc: func(_, obj any) { k.observe(obj, false) },
		DeleteFunc: func(obj any) { k.observe(obj, true) },
	}); err != nil {
		cancel()
		return nil, fmt.Errorf("starting the kubelet stand-in: %w", err)
	}
	k.factory.Start(kctx.Done())
	if !cache.WaitForCacheSync(kctx.Done(), inf.HasSynced) {
		k.Stop()
		return nil, fmt.Errorf("starting the kubelet stand-in: pods of %s not listed: %w", namespace, ctx.Err())
	}
	return k, nil
}

// Running is how many servers accept connections and have not been told to
// stop. Wait for it before sending traffic: kwok marks a pod Ready without
// waiting for its server.
func (k *Kubelet) Running() int { return int(k.running.Load()) }

// Errors are the first problems the Kubelet met (a server that did not
// start, crashed or had to be killed, a pod it could not delete).
func (k *Kubelet) Errors() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.errs...)
}

// Stop kills every server and waits for them and for the Kubelet's own
// goroutines. Pods it was serving are left as they are; a pod deleted from
// then on stays Terminating (see ReleasePods).
func (k *Kubelet) Stop() {
	k.mu.Lock()
	k.stopped = true
	k.mu.Unlock()
	k.cancel()
	k.factory.Shutdown()
	k.wg.Wait()
	for {
		select {
		case s := <-k.spares:
			s.Kill()
		default:
			return
		}
	}
}

// keepSpares starts server processes ahead of need, until the Kubelet stops.
func (k *Kubelet) keepSpares() {
	defer k.wg.Done()
	for k.ctx.Err() == nil {
		s, err := k.net.spawn()
		if err != nil {
			k.recordError(fmt.Errorf("starting a spare server: %w", err))
			select {
			case <-k.ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		select {
		case k.spares <- s:
		case <-k.ctx.Done():
			s.Kill()
		}
	}
}

// server returns a started server process: a spare if one is left.
func (k *Kubelet) server() (*Server, error) {
	for {
		select {
		case s := <-k.spares:
			select {
			case <-s.Done(): // died waiting; take another
				continue
			default:
				return s, nil
			}
		default:
			return k.net.spawn()
		}
	}
}

func (k *Kubelet) recordError(err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.errs) < maxErrors {
		k.errs = append(k.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
	}
}

// observe hands the pod's latest state to its worker, starting one the
// first time the pod is seen.
func (k *Kubelet) observe(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.finished[pod.UID] {
		if gone {
			delete(k.finished, pod.UID)
		}
		return
	}
	w := k.workers[pod.UID]
	if w == nil {
		if gone || k.stopped {
			return
		}
		w = &podWorker{k: k, uid: pod.UID, kick: make(chan struct{}, 1)}
		k.workers[pod.UID] = w
		k.wg.Add(1)
		go w.run()
	}
	w.update(pod, gone)
}

// podWorker carries out one pod's life, one step at a time, as the
// kubelet's pod workers do: a deletion that arrives while the server starts
// waits for the start to end.
type podWorker struct {
	k    *Kubelet
	uid  types.UID
	kick chan struct{}

	mu   sync.Mutex
	pod  *corev1.Pod // latest state seen
	gone bool        // the pod no longer exists

	server    *Server // owned by run
	startFail bool
	crashed   bool
}

func (w *podWorker) update(pod *corev1.Pod, gone bool) {
	w.mu.Lock()
	w.pod, w.gone = pod, w.gone || gone
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

func (w *podWorker) latest() (*corev1.Pod, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pod, w.gone
}

func (w *podWorker) run() {
	k := w.k
	defer k.wg.Done()
	defer func() {
		k.mu.Lock() // before w.mu, as in observe
		_, gone := w.latest()
		delete(k.workers, w.uid)
		if !gone { // events still to come must not start the pod again
			k.finished[w.uid] = true
		}
		k.mu.Unlock()
	}()
	for {
		var exited <-chan struct{}
		if w.server != nil && !w.crashed {
			exited = w.server.Done()
		}
		select {
		case <-k.ctx.Done():
			w.stopServer(nil)
			return
		case <-exited:
			w.crashed = true
			k.running.Add(-1)
			k.recordError(fmt.Errorf("server of pod %s/%s exited on its own: %s", k.namespace, w.name(), w.server.Output()))
			continue
		case <-w.kick:
		}
		pod, gone := w.latest()
		if gone || pod.DeletionTimestamp != nil {
			w.terminate(pod, gone)
			return
		}
		if w.server == nil && !w.startFail && pod.Status.PodIP != "" {
			w.start(pod)
		}
	}
}

func (w *podWorker) name() string {
	pod, _ := w.latest()
	return pod.Name
}

// start runs the pod's server; a pod whose server cannot start is left
// without one, as a container stuck in a crash loop would be.
func (w *podWorker) start(pod *corev1.Pod) {
	k := w.k
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err == nil && !k.net.Contains(ip) {
		err = fmt.Errorf("pod IP %s is outside network %s (%s): is its node's spec.podCIDR in it?", ip, k.net.Name(), k.net.Prefix())
	}
	var s *Server
	if err == nil {
		s, err = k.server()
	}
	if err == nil {
		if err = s.assign(k.ctx, k.net, pod.Name, netip.AddrPortFrom(ip, uint16(k.opts.Port)), k.opts.PreStopSleep); err != nil {
			s.Kill()
		} else {
			w.server = s
		}
	}
	if err != nil {
		w.startFail = true
		if k.ctx.Err() == nil {
			k.recordError(fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
		}
		return
	}
	k.running.Add(1)
}

// stopServer terminates the server, if any, within the pod's grace period;
// with no pod (the Kubelet stops) it kills it at once.
func (w *podWorker) stopServer(pod *corev1.Pod) {
	if w.server == nil {
		return
	}
	if !w.crashed {
		w.k.running.Add(-1)
	}
	if pod == nil {
		w.server.Kill()
		return
	}
	if err := w.server.Terminate(w.k.ctx, gracePeriod(pod)); err != nil && w.k.ctx.Err() == nil && !w.crashed {
		w.k.recordError(fmt.Errorf("pod %s/%s: %w", pod.Namespace, pod.Name, err))
	}
}

// terminate stops the server and then deletes the pod for good, with a UID
// precondition so a new pod of the same name is never touched. Grace 0 is
// what a real kubelet sends once the containers are gone: the API server
// has waited for it all along.
func (w *podWorker) terminate(pod *corev1.Pod, gone bool) {
	k := w.k
	w.stopServer(pod)
	if gone {
		return
	}
	opts := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(pod.UID))}
	var err error
	for attempt := 0; attempt < 10; attempt++ {
		err = k.cs.CoreV1().Pods(pod.Namespace).Delete(k.ctx, pod.Name, opts)
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return
		}
		select {
		case <-k.ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	k.recordError(fmt.Errorf("deleting pod %s/%s after its server exited: %w", pod.Namespace, pod.Name, err))
}

// gracePeriod is the pod's termination grace period as the deletion set it.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}

// ReleasePods deletes at once (grace 0) every pod of namespace labelled
// KubeletLabel. Call it after Stop, before deleting the namespace: with no
// Kubelet nothing finishes their deletion (kwok leaves them), and the
// namespace would stay Terminating.
func ReleasePods(ctx context.Context, cs kubernetes.Interface, namespace string) error {
	list, err := cs.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: KubeletLabel})
	if err != nil {
		return fmt.Errorf("listing the pods of %s to release: %w", namespace, err)
	}
	var errs []error
	for _, p := range list.Items {
		err := cs.CoreV1().Pods(namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
			GracePeriodSeconds: ptr.To[int64](0), Preconditions: metav1.NewUIDPreconditions(string(p.UID))})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			errs = append(errs, fmt.Errorf("releasing pod %s/%s: %w", namespace, p.Name, err))
		}
	}
	return errors.Join(errs...)
}
