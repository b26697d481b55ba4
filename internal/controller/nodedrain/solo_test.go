package nodedrain_test

import (
	"context"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/controller/admission"
	"github.com/vacate-dev/vacate/internal/controller/index"
	"github.com/vacate-dev/vacate/internal/controller/nodedrain"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/eviction"
)

// solo configures runSolo.
type solo struct {
	// client wraps the manager's client; nil keeps it.
	client func(client.Client) client.Client
	// shareClient gives the wrapped client to the admission controller
	// too (in a real manager the two share one cache).
	shareClient bool
	// evict wraps the Eviction API call; nil keeps it.
	evict func(eviction.EvictFunc) eviction.EvictFunc
	// queue are the eviction queue's options; NewReconciler sets OnOutcome and
	// MayEvict.
	queue eviction.Options
}

// runSolo runs the NodeDrain controller alone (with only the admission
// controller, which starts its drains; no other controller of vacate), with
// APIReader the manager's uncached reader, until the test ends, and returns
// it. The wrapped client is the NodeDrain controller's only, unless
// shareClient.
func runSolo(t *testing.T, c *devcluster.Cluster, s solo) *nodedrain.Reconciler {
	t.Helper()
	var r *nodedrain.Reconciler
	testenv.RunManager(t, c, func(mgr ctrl.Manager) error {
		if err := index.RegisterAll(context.Background(), mgr); err != nil {
			return err
		}
		cs, err := kubernetes.NewForConfig(c.RESTConfig)
		if err != nil {
			return err
		}
		evict := eviction.ClientEvictor(cs)
		if s.evict != nil {
			evict = s.evict(evict)
		}
		cl := mgr.GetClient()
		if s.client != nil {
			cl = s.client(cl)
		}
		evictions := eviction.NewQueueWithEvictor(evict, s.queue)
		if err := mgr.Add(evictions); err != nil {
			return err
		}
		r = nodedrain.NewReconciler(cl, clock.RealClock{}, mgr.GetEventRecorder("vacate-test"), evictions)
		evictions.Handle(eviction.ForDrains, r.OnOutcome, r.MayEvict)
		r.APIReader = mgr.GetAPIReader()
		admClient := mgr.GetClient()
		if s.shareClient {
			admClient = cl
		}
		adm := &admission.Reconciler{Client: admClient, APIReader: mgr.GetAPIReader(), Clock: clock.RealClock{}, Events: mgr.GetEventRecorder("vacate-test")}
		if err := adm.SetupWithManager(mgr); err != nil {
			return err
		}
		return r.SetupWithManager(mgr)
	})
	return r
}
