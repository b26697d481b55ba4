package eviction

import (
	"context"
	"errors"
	"fmt"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// One Eviction API call, and how its answer is classified: by the error's
// type and status and the DisruptionBudget cause, never by its text.

// evict makes one Eviction API call and classifies the answer.
func (q *Queue) evict(ctx context.Context, r Request) Outcome {
	return q.call(ctx, r, nil)
}

// call makes one Eviction API call, a dry run when dryRun is set, and
// classifies the answer.
func (q *Queue) call(ctx context.Context, r Request, dryRun []string) Outcome {
	ev := &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Namespace: r.Pod.Namespace, Name: r.Pod.Name},
		DeleteOptions: &metav1.DeleteOptions{
			Preconditions:      &metav1.Preconditions{UID: &r.UID},
			GracePeriodSeconds: r.GracePeriodSeconds,
			DryRun:             dryRun,
		},
	}
	cctx, cancel := context.WithTimeout(ctx, q.opts.CallTimeout)
	defer cancel()
	err := q.evict1(cctx, ev)
	if err != nil && ctx.Err() == nil && errors.Is(cctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: no answer within %s", ErrCallTimeout, q.opts.CallTimeout)
	}
	out := Outcome{Pod: r.Pod, UID: r.UID, Node: r.Node, For: r.For, At: q.opts.Clock.Now()}
	switch {
	case err == nil:
		out.Result = Evicted
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		out.Result = Gone
	default:
		out.Result, out.Message = classify(err)
		out.Code = statusCode(err)
		out.Err = fmt.Errorf("evicting pod %s: %w", r.Pod, err)
		if s, ok := apierrors.SuggestsClientDelay(err); ok && out.Result == Throttled {
			out.RetryAfter = time.Duration(s) * time.Second
		}
	}
	return out
}

// classify names a refused eviction by the error's type and status, and
// returns the API server's own message for it.
func classify(err error) (Result, string) {
	switch {
	case apierrors.IsTooManyRequests(err):
		if msg, ok := disruptionCause(err); ok {
			return PDBBlocked, msg
		}
		return Throttled, apiMessage(err)
	case apierrors.IsForbidden(err):
		// Since Kubernetes 1.37 a PDB's own 403s (disruptionsAllowed
		// negative, too many unconfirmed evictions) carry the cause too.
		if msg, ok := disruptionCause(err); ok {
			return PDBBlocked, msg
		}
		return Forbidden, apiMessage(err)
	case apierrors.IsInvalid(err):
		return Invalid, apiMessage(err)
	default:
		return Failed, apiMessage(err)
	}
}

// disruptionCause returns the message of the DisruptionBudget cause of a
// 429 or 403, and whether it has one: only then did a PodDisruptionBudget
// refuse.
func disruptionCause(err error) (string, bool) {
	var se apierrors.APIStatus
	if !errors.As(err, &se) || se.Status().Details == nil {
		return "", false
	}
	for _, c := range se.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause {
			msg := c.Message
			if msg == "" {
				msg = se.Status().Message
			}
			return msg, true
		}
	}
	return "", false
}

// apiMessage is the API server's message of an error, or the error's text
// when the API server did not answer.
func apiMessage(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) && se.Status().Message != "" {
		return se.Status().Message
	}
	return err.Error()
}

// statusCode is the HTTP status code of the API server's answer, 0 when
// there was none.
func statusCode(err error) int32 {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		return se.Status().Code
	}
	return 0
}
