package traffic

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// Workload is a served application: a Deployment whose pods a Kubelet
// serves, a Service in front of it and a PDB that lets one pod go at a
// time, the smallest setup in which a drain can drop requests.
type Workload struct {
	Namespace string
	// Name of the Deployment, the Service and the PDB; the pods are
	// labelled app=Name.
	Name     string
	Replicas int32
	// Port of the Service and of the servers. Default 8080.
	Port int32
	// NodeSelector, when set, keeps the pods on matching nodes: those whose
	// spec.podCIDR lies in the Network.
	NodeSelector map[string]string
	// GracePeriod is the pods' termination grace period. Default 5s, the
	// fixtures' own, enough for a preStop sleep of a few seconds.
	GracePeriod time.Duration
	// ReadinessGate declares vacate's readiness gate (vacate.dev/serving)
	// in the pod template: the pods are endpoint-aware.
	ReadinessGate bool
	// PDB is the PodDisruptionBudget: "" for maxUnavailable 1, "none" for
	// none, or "minAvailable=N".
	PDB string
}

// CreateWorkload creates the Deployment, the Service and the PDB. Pods are
// spread over the nodes as evenly as the scheduler can (a soft constraint),
// so that draining one node does not take every endpoint away at once.
func CreateWorkload(ctx context.Context, cs kubernetes.Interface, w Workload) error {
	if w.Port == 0 {
		w.Port = 8080
	}
	if w.GracePeriod == 0 {
		w.GracePeriod = 5 * time.Second
	}
	dep := devcluster.Deployment(w.Namespace, w.Name, w.Replicas)
	spec := &dep.Spec.Template.Spec
	dep.Spec.Template.Labels[KubeletLabel] = "true"
	spec.NodeSelector = w.NodeSelector
	spec.TerminationGracePeriodSeconds = ptr.To(int64(w.GracePeriod / time.Second))
	spec.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: w.Port}}
	if w.ReadinessGate {
		spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: v1alpha1.ConditionServing}}
		dep.Spec.Template.Labels[v1alpha1.LabelEndpointAware] = "true" // declared by hand: labelled too
	}
	spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
		MaxSkew: 1, TopologyKey: devcluster.HostnameLabel, WhenUnsatisfiable: corev1.ScheduleAnyway,
		LabelSelector: dep.Spec.Selector,
	}}
	if _, err := cs.AppsV1().Deployments(w.Namespace).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating deployment %s/%s: %w", w.Namespace, w.Name, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: w.Namespace, Name: w.Name, Labels: map[string]string{devcluster.FixtureLabel: "true"}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{devcluster.AppLabel: w.Name},
			Ports:    []corev1.ServicePort{{Name: "http", Port: w.Port, TargetPort: intstr.FromString("http")}},
		},
	}
	if _, err := cs.CoreV1().Services(w.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating service %s/%s: %w", w.Namespace, w.Name, err)
	}
	pdb := devcluster.PDB(w.Namespace, w.Name, w.Name, "", "1")
	switch {
	case w.PDB == "none":
		return nil
	case strings.HasPrefix(w.PDB, "minAvailable="):
		pdb = devcluster.PDB(w.Namespace, w.Name, w.Name, strings.TrimPrefix(w.PDB, "minAvailable="), "")
	case w.PDB != "":
		return fmt.Errorf("PDB %q: want \"\", \"none\" or \"minAvailable=N\"", w.PDB)
	}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(w.Namespace).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating PDB %s/%s: %w", w.Namespace, w.Name, err)
	}
	return nil
}

// WaitForEndpoints waits until the Service's EndpointSlices list count
// ready endpoints, and returns their addresses.
func WaitForEndpoints(ctx context.Context, cs kubernetes.Interface, namespace, service string, count int, timeout time.Duration) ([]netip.Addr, error) {
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: service}).String()
	var ready []netip.Addr
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := cs.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return false, nil
		}
		ready = ready[:0]
		for _, s := range list.Items {
			for _, e := range s.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil {
						ready = append(ready, ip)
					}
				}
			}
		}
		return len(ready) == count, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d ready endpoints of service %s/%s (have %d): %w", count, namespace, service, len(ready), err)
	}
	slices.SortFunc(ready, netip.Addr.Compare)
	return ready, nil
}
