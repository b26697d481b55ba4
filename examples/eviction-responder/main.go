// Command eviction-responder is a responder of Kubernetes' EvictionRequest
// API (lifecycle.k8s.io/v1alpha1, KEP-4563) written only against the
// upstream types and client-go, as an operator that moves its pods' data
// before they go would write one. It knows nothing of vacate: any
// coordinator that follows the API gives it its turn.
//
// For every Eviction in its namespace whose turn is its responder's
// (targetResponders[].state Active), it writes its own entry of
// status.responders: startTime when it takes the turn (with the time it
// expects to be done), a heartbeatTime and a message every -heartbeat while
// it "moves the data" (here it waits -work), then completionTime. All its
// state is in the Eviction, so a restart goes on where it was. With -stall
// it takes the turn and then stops reporting, as a stuck operator would:
// the coordinator interrupts it once its last heartbeat is 20 minutes old
// and the next responder goes on.
//
//	eviction-responder -name mover.example.com/responder -namespace shop -work 2m
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	lifecyclev1alpha1 "k8s.io/api/lifecycle/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// responder is one responder's work on the Evictions of a namespace.
type responder struct {
	cs        kubernetes.Interface
	name      string
	work      time.Duration
	heartbeat time.Duration
	stall     bool
	queue     workqueue.TypedDelayingInterface[cache.ObjectName]
	evictions cache.Indexer
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (empty: in-cluster)")
	namespace := flag.String("namespace", "", "the namespace whose Evictions to answer (empty: all)")
	r := &responder{}
	flag.StringVar(&r.name, "name", "", "the responder's name, as the pods declare it in spec.evictionResponders (a domain-prefixed key)")
	flag.DurationVar(&r.work, "work", 10*time.Second, "how long moving a pod's data takes")
	flag.DurationVar(&r.heartbeat, "heartbeat", 20*time.Second, "how often to report while at work (the API asks for no more often than 20s)")
	flag.BoolVar(&r.stall, "stall", false, "take the turn, then never report again (a stuck operator)")
	flag.Parse()
	if r.name == "" || r.work <= 0 || r.heartbeat <= 0 {
		log.Fatal("-name is required; -work and -heartbeat must be positive")
	}
	cfg, err := config(*kubeconfig)
	if err != nil {
		log.Fatal(err)
	}
	r.cs = kubernetes.NewForConfigOrDie(cfg)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := r.run(ctx, *namespace); err != nil {
		log.Fatal(err)
	}
}

func config(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// run answers until ctx ends: every change of an Eviction, and every
// heartbeat due, is one look at it.
func (r *responder) run(ctx context.Context, namespace string) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.cs, 10*time.Minute, informers.WithNamespace(namespace))
	inf := factory.Lifecycle().V1alpha1().Evictions().Informer()
	r.queue = workqueue.NewTypedDelayingQueue[cache.ObjectName]()
	enqueue := func(o any) {
		if name, err := cache.DeletionHandlingObjectToName(o); err == nil {
			r.queue.Add(name)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }}); err != nil {
		return err
	}
	r.evictions = inf.GetIndexer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return fmt.Errorf("the Evictions' cache did not sync")
	}
	log.Printf("responder %s: answering Evictions in %q", r.name, namespace)
	go func() { <-ctx.Done(); r.queue.ShutDown() }()
	for {
		name, shut := r.queue.Get()
		if shut {
			return nil
		}
		if err := r.look(ctx, name); err != nil {
			log.Printf("eviction %s: %v (again in 1s)", name, err)
			r.queue.AddAfter(name, time.Second)
		}
		r.queue.Done(name)
	}
}

// look writes what is due in the Eviction, if the turn is ours, and asks
// to look again when the next report is due.
func (r *responder) look(ctx context.Context, name cache.ObjectName) error {
	var again time.Duration
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ev, err := r.cs.LifecycleV1alpha1().Evictions(name.Namespace).Get(ctx, name.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil // gone: nothing to answer
		} else if err != nil {
			return err
		}
		st := r.entry(ev)
		if st == nil || st.CompletionTime != nil || !r.ourTurn(ev) {
			return nil
		}
		now := time.Now()
		switch {
		case r.stall:
			log.Printf("eviction %s: our turn; stalled, not reporting", name)
			return nil
		case st.HeartbeatTime == nil: // the turn is new (the coordinator may have set its start)
			if st.StartTime == nil {
				st.StartTime = &metav1.Time{Time: now}
			}
			st.HeartbeatTime = &metav1.Time{Time: now}
			st.ExpectedCompletionTime = &metav1.Time{Time: st.StartTime.Add(r.work)}
			st.Message = ptr("moving the pod's data")
			log.Printf("eviction %s: took the turn", name)
		case now.Sub(st.StartTime.Time) >= r.work:
			st.HeartbeatTime, st.CompletionTime = &metav1.Time{Time: now}, &metav1.Time{Time: now}
			st.Message = ptr("the pod's data moved")
			log.Printf("eviction %s: completed", name)
		case now.Sub(st.HeartbeatTime.Time) >= r.heartbeat:
			st.HeartbeatTime = &metav1.Time{Time: now}
			st.Message = ptr(fmt.Sprintf("moving the pod's data: %d%%", 100*now.Sub(st.StartTime.Time)/r.work))
			log.Printf("eviction %s: heartbeat: %s", name, *st.Message)
		default:
			again = min(r.heartbeat-now.Sub(st.HeartbeatTime.Time), r.work-now.Sub(st.StartTime.Time))
			return nil
		}
		if _, err := r.cs.LifecycleV1alpha1().Evictions(name.Namespace).UpdateStatus(ctx, ev, metav1.UpdateOptions{}); err != nil {
			return err
		}
		if st.CompletionTime == nil && !r.stall {
			again = min(r.heartbeat, r.work)
		}
		return nil
	})
	if err == nil && again > 0 {
		r.queue.AddAfter(name, again)
	}
	return err
}

// ourTurn says whether the Eviction gives this responder the turn.
func (r *responder) ourTurn(ev *lifecyclev1alpha1.Eviction) bool {
	for _, t := range ev.Status.TargetResponders {
		if t.Name == r.name {
			return t.State == lifecyclev1alpha1.ResponderStateActive
		}
	}
	return false
}

// entry is this responder's entry of status.responders, or nil.
func (r *responder) entry(ev *lifecyclev1alpha1.Eviction) *lifecyclev1alpha1.ResponderStatus {
	for i := range ev.Status.Responders {
		if ev.Status.Responders[i].Name == r.name {
			return &ev.Status.Responders[i]
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
