package devcluster

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The identity vacate-controller proves to HTTP evacuation hooks: tokens of
// its service account (hook.DefaultCaller), which a controller run out of
// the cluster (the demo, tests, vacate-dev controller) requests too.
const (
	ControllerNamespace      = "vacate-system"
	ControllerServiceAccount = "vacate-controller"
)

// InstallControllerIdentity creates the namespace vacate-system and the
// service account vacate-controller unless they exist, so that a
// controller run out of the cluster can request the tokens it sends to
// HTTP hooks. A namespace being deleted (a test uninstalled vacate) is
// waited out and created again.
func InstallControllerIdentity(ctx context.Context, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ControllerNamespace}}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			last = err
			return false, nil
		}
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: ControllerServiceAccount, Namespace: ControllerNamespace}}
		_, err := cs.CoreV1().ServiceAccounts(ControllerNamespace).Create(ctx, sa, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return true, nil
		}
		last = err // the namespace is being deleted: wait until it is gone
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("creating service account %s/%s (the identity hooks are called with): %w (last: %v)", ControllerNamespace, ControllerServiceAccount, err, last)
	}
	return nil
}
