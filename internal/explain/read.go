package explain

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/progress"
)

// Read reads what explaining the drain needs: the blocked pods, the PDBs
// that hold them and the pods those PDBs select. It only reads. Now is left
// for the caller to set.
func Read(ctx context.Context, cs kubernetes.Interface, nd *v1alpha1.NodeDrain) (Input, error) {
	in := Input{Drain: nd, Pods: map[string]*corev1.Pod{}, PDBs: map[string]*policyv1.PodDisruptionBudget{}, PDBPods: map[string][]*corev1.Pod{}}
	for _, b := range nd.Status.Blockers {
		ns, name, _ := strings.Cut(b.Pod, "/")
		p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil:
			in.Pods[b.Pod] = p
		case !apierrors.IsNotFound(err):
			return in, fmt.Errorf("reading pod %s: %w", b.Pod, err)
		}
		kind, holders, _ := strings.Cut(b.Holder, " ")
		if kind != "PodDisruptionBudget" {
			continue
		}
		for _, key := range strings.Split(holders, ", ") {
			if _, done := in.PDBs[key]; done {
				continue
			}
			if err := readPDB(ctx, cs, key, &in); err != nil {
				return in, err
			}
		}
	}
	return in, nil
}

func readPDB(ctx context.Context, cs kubernetes.Interface, key string, in *Input) error {
	ns, name, _ := strings.Cut(key, "/")
	pdb, err := cs.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		in.PDBs[key] = nil
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading PodDisruptionBudget %s: %w", key, err)
	}
	in.PDBs[key] = pdb
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil {
		return fmt.Errorf("PodDisruptionBudget %s has an invalid selector: %w", key, err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return fmt.Errorf("listing the pods of PodDisruptionBudget %s: %w", key, err)
	}
	for i := range pods.Items {
		in.PDBPods[key] = append(in.PDBPods[key], &pods.Items[i])
	}
	return nil
}

// Write prints the explanation for people: the state, then each finding
// numbered, with why and what to do.
func (e Explanation) Write(w io.Writer, now time.Time) error {
	fmt.Fprintln(w, e.State)
	if e.EvictionRequests != "" {
		fmt.Fprintln(w, "pods with eviction responders: "+e.EvictionRequests)
	}
	if len(e.Findings) == 0 {
		_, err := fmt.Fprintln(w, e.Idle)
		return err
	}
	for i, f := range e.Findings {
		since := ""
		if !f.Since.IsZero() {
			since = " (for " + progress.Duration(now.Sub(f.Since)) + ")"
		}
		fmt.Fprintf(w, "\n%d. %s%s\n   why:  %s\n", i+1, f.Subject, since, f.Cause)
		if f.Fix != "" {
			if _, err := fmt.Fprintf(w, "   do:   %s\n", f.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}
