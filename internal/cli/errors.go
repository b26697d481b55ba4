package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
)

// Errors the CLI explains in one line: what is wrong and what to do.

// noConfigError: no kubeconfig, or one that does not name a cluster.
// devTools: vacate-dev is at hand (a checkout's make build), so the dev
// cluster is a cluster to point at; the vacate users install has no
// 'vacate dev' and is not told to run it.
type noConfigError struct {
	err      error
	devTools bool
}

// newNoConfigError says what is wrong, and offers the dev cluster only
// where vacate-dev is found as 'vacate dev' finds it.
func newNoConfigError(err error) noConfigError {
	_, missing := findDevTool()
	return noConfigError{err: err, devTools: missing == nil}
}

func (e noConfigError) Error() string {
	msg := fmt.Sprintf("no cluster to talk to (%v): set KUBECONFIG or pass --kubeconfig (and --context), as for kubectl", e.err)
	if e.devTools {
		msg += "; for the local dev cluster run: eval \"$(vacate dev env)\""
	}
	return msg
}

func (e noConfigError) Unwrap() error { return e.err }

// unreachableError: the API server did not answer.
type unreachableError struct {
	where, doing string
	cause        error
}

func (e unreachableError) Error() string {
	return fmt.Sprintf("cannot reach %s while %s: %v; is the cluster running? check --kubeconfig and --context",
		e.where, e.doing, e.cause)
}

func (e unreachableError) Unwrap() error { return e.cause }

// missingCRDsError: the cluster does not serve vacate.dev/v1alpha1.
type missingCRDsError struct{ where string }

func (e missingCRDsError) Error() string {
	return fmt.Sprintf("vacate is not installed in %s (the API vacate.dev/v1alpha1 is not served): "+
		"install the CRDs with 'vacate manifests crds | kubectl apply -f -' and run the controller (see the README, Quick start)", e.where)
}

// unknownNodeError: a node named on the command line does not exist.
type unknownNodeError struct{ name, where string }

func (e unknownNodeError) Error() string {
	return fmt.Sprintf("node %q not found in %s; see 'kubectl get nodes'", e.name, e.where)
}

// permissionError: RBAC, or an admission policy, forbids a request.
type permissionError struct {
	doing string
	cause *apierrors.StatusError
	// need says what to do instead of binding vacate-user, for commands
	// that need more than it (uninstall).
	need string
}

func (e permissionError) Error() string {
	msg := e.cause.ErrStatus.Message
	if _, after, ok := strings.Cut(msg, "is forbidden: "); ok {
		msg = after
	}
	need := e.need
	switch {
	case need != "":
	case admissionRefusal(e.cause):
		need = "RBAC allows it, the cluster's admission policy does not (see 'Permissions' in vacate's docs/cli.md)"
	default:
		need = "ask a cluster admin to bind the ClusterRole vacate-user to you ('vacate manifests user-role' prints it)"
	}
	return fmt.Sprintf("permission denied while %s: %s; %s", e.doing, msg, need)
}

// admissionRefusal: the refusal came from an admission policy, which
// states its causes, not from RBAC, which states none: binding a role
// would not help.
func admissionRefusal(err *apierrors.StatusError) bool {
	d := err.ErrStatus.Details
	return d != nil && len(d.Causes) > 0
}

func (e permissionError) Unwrap() error { return e.cause }

// explain turns an API error into one that says what to do, where it can.
func (s *session) explain(err error, doing string) error {
	var status *apierrors.StatusError
	var urlErr *url.Error
	var netErr net.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: interrupted", doing)
	case errors.Is(err, context.DeadlineExceeded) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err):
		return fmt.Errorf("%s: %s did not answer in time (see --request-timeout)", doing, s.where)
	case meta.IsNoMatchError(err):
		return missingCRDsError{where: s.where}
	case errors.As(err, &status) && apierrors.IsForbidden(err):
		return permissionError{doing: doing, cause: status}
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s rejected your credentials while %s (401 Unauthorized): log in again or check the user in your kubeconfig", s.where, doing)
	case errors.As(err, &urlErr):
		return unreachableError{where: s.where, doing: doing, cause: innermost(urlErr.Err)}
	case errors.As(err, &netErr):
		return unreachableError{where: s.where, doing: doing, cause: netErr}
	}
	return fmt.Errorf("%s: %w", doing, err)
}

// innermost unwraps an error chain to its last link, which for network
// errors is the cause people recognise ("connection refused").
func innermost(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}
