package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// tightDrain is what a script in a hurry does: cordon every node, list their
// pods, and evict every pod but DaemonSet pods at once, each retried as soon
// as it is refused, with no client-side rate limit. It returns once every
// eviction was accepted (or the pod is gone); it does not wait for the pods
// to terminate.
func tightDrain(ctx context.Context, kubeconfig string, nodes []string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("loading kubeconfig: %w", err)
	}
	cfg.QPS = -1 // no client-side limiter
	cfg.UserAgent = "bench-tight"
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var pods []corev1.Pod
	for _, n := range nodes {
		patch := []byte(`{"spec":{"unschedulable":true}}`)
		if _, err := cs.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("cordoning node %s: %w", n, err)
		}
	}
	for _, n := range nodes {
		list, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n})
		if err != nil {
			return fmt.Errorf("listing pods of node %s: %w", n, err)
		}
		for _, p := range list.Items {
			if !daemonSetPod(&p) {
				pods = append(pods, p)
			}
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(pods))
	for i := range pods {
		wg.Add(1)
		go func(p *corev1.Pod) {
			defer wg.Done()
			errs <- evictUntilDone(ctx, cs, p)
		}(&pods[i])
	}
	wg.Wait()
	close(errs)
	var failed []string
	for err := range errs {
		if err != nil {
			failed = append(failed, err.Error())
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d evictions failed: %s", len(failed), strings.Join(failed[:min(3, len(failed))], "; "))
	}
	return nil
}

// evictUntilDone asks to evict the pod until it is accepted or the pod is
// gone (404, or 409 for a pod of the same name but another UID), retrying
// any other answer at once. client-go would wait out a 429's Retry-After
// (10 s for a PDB refusal) and retry by itself; the request turns that off.
func evictUntilDone(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod) error {
	ev := &policyv1.Eviction{
		TypeMeta:      metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta:    metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	}
	for {
		err := cs.CoreV1().RESTClient().Post().MaxRetries(0).
			Namespace(p.Namespace).Resource("pods").Name(p.Name).SubResource("eviction").
			Body(ev).Do(ctx).Error()
		switch {
		case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("evicting pod %s/%s: %w", p.Namespace, p.Name, ctx.Err())
		}
	}
}
