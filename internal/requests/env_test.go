package requests

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kube-openapi/pkg/validation/spec"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/config/crd"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// This file is the tests' fake API server and their helpers.
//
// The fake client runs server-side apply (structured-merge-diff, as the API
// server does) with the type converter it is given. Built from vacate's own
// CRD schemas, it merges spec.requesters as the list map keyed by name that
// the CRD declares, so each manager owns its entry, and conflicts name the
// fields (.spec.mode) as the API server's do. It does not run the CRD's CEL
// rules, defaults, or the UID precondition on an existing object; tests
// that need those script the server's answer with an interceptor.

var drainsGR = schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "nodedrains"}

// crdTypeConverter types vacate's objects by the openAPIV3Schema of its
// CRDs, as the API server types a CRD's objects for server-side apply.
func crdTypeConverter(t *testing.T) managedfields.TypeConverter {
	t.Helper()
	crds, err := crd.CRDs()
	if err != nil {
		t.Fatal(err)
	}
	defs := map[string]*spec.Schema{}
	for _, c := range crds {
		for _, v := range c.Spec.Versions {
			data, err := json.Marshal(v.Schema.OpenAPIV3Schema)
			if err != nil {
				t.Fatal(err)
			}
			s := &spec.Schema{}
			if err := json.Unmarshal(data, s); err != nil {
				t.Fatal(err)
			}
			s.AddExtension("x-kubernetes-group-version-kind", []any{map[string]any{"group": c.Spec.Group, "version": v.Name, "kind": c.Spec.Names.Kind}})
			defs[c.Spec.Group+"."+v.Name+"."+c.Spec.Names.Kind] = s
		}
	}
	tc, err := managedfields.NewTypeConverter(defs, false)
	if err != nil {
		t.Fatal(err)
	}
	return tc
}

// sentApply is a server-side apply the code sent.
type sentApply struct {
	manager string
	force   bool
	body    map[string]any
}

// spec is the applied spec.
func (a sentApply) spec() map[string]any { s, _ := a.body["spec"].(map[string]any); return s }

// meta is the applied metadata.
func (a sentApply) meta() map[string]any { m, _ := a.body["metadata"].(map[string]any); return m }

// env is a fake API server that records the writes sent. The hooks, when
// set, answer the n-th call (from 1) in the server's place: a non-nil
// error refuses it; nil lets the fake server handle it.
type env struct {
	t       *testing.T
	c       client.Client
	applies []sentApply
	patches []string // JSON patches
	deletes []client.DeleteOptions

	applyErr  func(n int, a sentApply) error
	patchErr  func(n int, c client.Client) error
	deleteErr func(n int) error
}

func newEnv(t *testing.T, objs ...client.Object) *env {
	t.Helper()
	scheme := testutil.Scheme(t)
	e := &env{t: t}
	base := fake.NewClientBuilder().WithScheme(scheme).WithTypeConverters(crdTypeConverter(t)).
		WithReturnManagedFields().WithObjects(objs...).Build()
	e.c = interceptor.NewClient(base, interceptor.Funcs{
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			o := &client.ApplyOptions{}
			o.ApplyOptions(opts)
			data, err := json.Marshal(obj)
			if err != nil {
				t.Fatal(err)
			}
			a := sentApply{manager: o.FieldManager, force: o.Force != nil && *o.Force}
			if err := json.Unmarshal(data, &a.body); err != nil {
				t.Fatal(err)
			}
			e.applies = append(e.applies, a)
			e.bound(len(e.applies), "applies")
			if e.applyErr != nil {
				if err := e.applyErr(len(e.applies), a); err != nil {
					return err
				}
			}
			return c.Apply(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			data, err := patch.Data(obj)
			if err != nil {
				return err
			}
			if patch.Type() != types.JSONPatchType {
				t.Errorf("sent a %s patch, want JSON patches only", patch.Type())
			}
			e.patches = append(e.patches, string(data))
			e.bound(len(e.patches), "patches")
			if e.patchErr != nil {
				if err := e.patchErr(len(e.patches), c); err != nil {
					return err
				}
			}
			err = c.Patch(ctx, obj, patch, opts...)
			var status apierrors.APIStatus
			if err != nil && !errors.As(err, &status) {
				// A JSON patch the server cannot apply (its test op
				// failed) is a 422, as k8s.io/apiserver's patch handler
				// answers; the fake returns a plain error.
				err = apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", drainsGR, obj.GetName(), err.Error(), 0, false)
			}
			return err
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			o := client.DeleteOptions{}
			o.ApplyOptions(opts)
			e.deletes = append(e.deletes, o)
			e.bound(len(e.deletes), "deletes")
			if e.deleteErr != nil {
				if err := e.deleteErr(len(e.deletes)); err != nil {
					return err
				}
			}
			// The fake checks the resourceVersion precondition, not the
			// UID's: check it as the API server does.
			if p := o.Preconditions; p != nil && p.UID != nil {
				cur := &v1alpha1.NodeDrain{}
				if err := c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err == nil && cur.UID != *p.UID {
					return apierrors.NewConflict(drainsGR, obj.GetName(), fmt.Errorf("Precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, cur.UID))
				}
			}
			return c.Delete(ctx, obj, opts...)
		},
	})
	return e
}

// bound stops a test whose code under test keeps writing: its retries
// must be bounded.
func (e *env) bound(n int, what string) {
	if n > 100 {
		e.t.Fatalf("sent more than 100 %s: a retry loop is unbounded", what)
	}
}

// drain reads the node's drain as the server has it, nil when there is none.
func (e *env) drain(node string) *v1alpha1.NodeDrain {
	e.t.Helper()
	nd := &v1alpha1.NodeDrain{}
	err := e.c.Get(context.Background(), types.NamespacedName{Name: node}, nd)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return nd
}

// mustDrain is the node's drain, which must exist.
func (e *env) mustDrain(node string) *v1alpha1.NodeDrain {
	e.t.Helper()
	nd := e.drain(node)
	if nd == nil {
		e.t.Fatalf("NodeDrain %s does not exist", node)
	}
	return nd
}

func names(nd *v1alpha1.NodeDrain) []string {
	var out []string
	for _, r := range nd.Spec.Requesters {
		out = append(out, r.Name)
	}
	return out
}

// entryKey is how managed fields name a requester's entry.
func entryKey(name string) string { return fmt.Sprintf(`k:{"name":%q}`, name) }

// owns reports whether the requester's manager owns the field at path in
// the drain's managed fields, such as "f:spec", "f:mode".
func owns(t *testing.T, nd *v1alpha1.NodeDrain, requester string, path ...string) bool {
	t.Helper()
	for _, m := range nd.ManagedFields {
		if m.Manager != FieldManager(requester) || m.FieldsV1 == nil {
			continue
		}
		var set map[string]any
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &set); err != nil {
			t.Fatal(err)
		}
		for i, p := range path {
			v, ok := set[p]
			if !ok {
				break
			}
			if i == len(path)-1 {
				return true
			}
			set, _ = v.(map[string]any)
		}
	}
	return false
}

// conflict is the error the API server returns for a server-side apply
// whose fields another manager owns with other values.
func conflict(fields ...string) error {
	var causes []metav1.StatusCause
	for _, f := range fields {
		causes = append(causes, metav1.StatusCause{Type: metav1.CauseTypeFieldManagerConflict, Message: `conflict with "vacate-cli:alice"`, Field: f})
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure, Code: http.StatusConflict, Reason: metav1.StatusReasonConflict,
		Message: fmt.Sprintf("Apply failed with %d conflicts", len(fields)),
		Details: &metav1.StatusDetails{Name: "n1", Group: "vacate.dev", Kind: "nodedrains", Causes: causes},
	}}
}

func plainConflict() error {
	return apierrors.NewConflict(drainsGR, "n1", errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

func forbidden() error { return apierrors.NewForbidden(drainsGR, "n1", errors.New("RBAC says no")) }

// errAccepted stands for the server's success in scripted answers, which
// must not reach the fake server.
var errAccepted = errors.New("accepted")

func refuseFirst(err error) func(int) error {
	return func(n int) error {
		if n == 1 {
			return err
		}
		return nil
	}
}
