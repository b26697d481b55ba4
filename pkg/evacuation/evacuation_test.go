package evacuation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/pkg/evacuation"
)

const (
	me        = "store"
	heartbeat = 7 * time.Second
)

// fakeProvider answers with what the test set and records what it was asked.
type fakeProvider struct {
	mu       sync.Mutex
	progress evacuation.Progress
	err      error
	calls    []string // "Evacuate node mode" or "Cancel node"
}

func (p *fakeProvider) Evacuate(_ context.Context, node string, mode v1alpha1.DrainMode) (evacuation.Progress, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "Evacuate "+node+" "+string(mode))
	return p.progress, p.err
}

func (p *fakeProvider) Cancel(_ context.Context, node string) (evacuation.Progress, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, "Cancel "+node)
	return p.progress, p.err
}

func (p *fakeProvider) answer(pr evacuation.Progress, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.progress, p.err, p.calls = pr, err, nil
}

func (p *fakeProvider) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// fixture is a Runner on a fake client that counts status writes.
type fixture struct {
	runner   *evacuation.Runner
	client   client.Client
	provider *fakeProvider
	clock    *clocktesting.FakePassiveClock
	writes   int
	// failPatch, when set, is returned by status writes.
	failPatch error
}

// evac is an Evacuation of node for provider at a generation.
func evac(name, provider string, desired v1alpha1.Desired, generation int64, st v1alpha1.EvacuationStatus) *v1alpha1.Evacuation {
	return &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name, Generation: generation},
		Spec: v1alpha1.EvacuationSpec{NodeName: "node-1", Provider: provider, Mode: v1alpha1.ModeDecommission,
			Desired: desired, DrainUID: "uid-1"},
		Status: st,
	}
}

func newFixture(t *testing.T, objs ...client.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	f := &fixture{provider: &fakeProvider{}, clock: clocktesting.NewFakePassiveClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))}
	f.client = fake.NewClientBuilder().WithScheme(scheme).
		WithStatusSubresource(&v1alpha1.Evacuation{}).
		WithObjects(objs...).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				f.writes++
				if f.failPatch != nil {
					return f.failPatch
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	f.runner = &evacuation.Runner{Client: f.client, Name: me, Provider: f.provider, Heartbeat: heartbeat, Clock: f.clock}
	return f
}

func (f *fixture) reconcile(t *testing.T, name string) (reconcile.Result, error) {
	t.Helper()
	return f.runner.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
}

func (f *fixture) get(t *testing.T, name string) *v1alpha1.Evacuation {
	t.Helper()
	ev := &v1alpha1.Evacuation{}
	if err := f.client.Get(context.Background(), types.NamespacedName{Name: name}, ev); err != nil {
		t.Fatal(err)
	}
	return ev
}

func wantCalls(t *testing.T, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("provider asked %q, want %q", got, want)
	}
}

// TestRunnerPhases: one step of the provider becomes the Evacuation's
// status: InProgress, Completed or Failed (Failed errors), InProgress with
// the error for other errors; always for the spec's generation, with a
// heartbeat; unfinished work is retried at the heartbeat.
func TestRunnerPhases(t *testing.T) {
	for _, tc := range []struct {
		name        string
		progress    evacuation.Progress
		err         error
		wantPhase   v1alpha1.EvacuationPhase
		wantMessage string
		wantRemain  int64
		wantRequeue time.Duration
	}{
		{"in progress", evacuation.Progress{Remaining: 12, Message: "copying replicas"}, nil,
			v1alpha1.EvacuationInProgress, "copying replicas", 12, heartbeat},
		{"completed", evacuation.Progress{Done: true, Message: "all replicas elsewhere"}, nil,
			v1alpha1.EvacuationCompleted, "all replicas elsewhere", 0, 0},
		{"failed", evacuation.Progress{Remaining: 3}, evacuation.Failed(errors.New("no peer has room")),
			v1alpha1.EvacuationFailed, "no peer has room", 3, heartbeat},
		{"failed, wrapped", evacuation.Progress{}, fmt.Errorf("volume v-1: %w", evacuation.Failed(errors.New("checksum mismatch"))),
			v1alpha1.EvacuationFailed, "volume v-1: checksum mismatch", 0, heartbeat},
		{"other error", evacuation.Progress{Remaining: 5}, errors.New("connection refused"),
			v1alpha1.EvacuationInProgress, "retrying after an error: connection refused", 5, heartbeat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, evac("node-1.store", me, v1alpha1.DesiredEvacuate, 3, v1alpha1.EvacuationStatus{}))
			f.provider.answer(tc.progress, tc.err)
			res, err := f.reconcile(t, "node-1.store")
			if err != nil {
				t.Fatal(err)
			}
			wantCalls(t, f.provider.asked(), "Evacuate node-1 Decommission")
			st := f.get(t, "node-1.store").Status
			if st.Phase != tc.wantPhase || st.Message != tc.wantMessage || st.Remaining != tc.wantRemain {
				t.Errorf("status %s %q remaining %d, want %s %q remaining %d", st.Phase, st.Message, st.Remaining, tc.wantPhase, tc.wantMessage, tc.wantRemain)
			}
			if st.ObservedGeneration != 3 {
				t.Errorf("observedGeneration %d, want 3", st.ObservedGeneration)
			}
			if st.HeartbeatTime == nil || !st.HeartbeatTime.Time.Equal(f.clock.Now()) {
				t.Errorf("heartbeat %v, want %v", st.HeartbeatTime, f.clock.Now())
			}
			if res.RequeueAfter != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", res.RequeueAfter, tc.wantRequeue)
			}
		})
	}
}

// TestRunnerFinishedIsLeftAlone: a Completed evacuation of the current
// generation is not stepped again nor written (no heartbeat needed), but
// one Completed for an older generation (the spec changed) is.
func TestRunnerFinishedIsLeftAlone(t *testing.T) {
	done := v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCompleted, ObservedGeneration: 2,
		HeartbeatTime: &metav1.Time{Time: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}}
	f := newFixture(t, evac("current", me, v1alpha1.DesiredEvacuate, 2, done), evac("older", me, v1alpha1.DesiredEvacuate, 3, done))
	f.provider.answer(evacuation.Progress{Done: true}, nil)

	res, err := f.reconcile(t, "current")
	if err != nil || !res.IsZero() {
		t.Fatalf("got %+v, %v; want nothing to do", res, err)
	}
	wantCalls(t, f.provider.asked())
	if f.writes != 0 {
		t.Errorf("%d status write(s) for a finished evacuation", f.writes)
	}

	if _, err := f.reconcile(t, "older"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.provider.asked(), "Evacuate node-1 Decommission")
	if st := f.get(t, "older").Status; st.Phase != v1alpha1.EvacuationCompleted || st.ObservedGeneration != 3 || !st.HeartbeatTime.Time.Equal(f.clock.Now()) {
		t.Errorf("older Completed not answered for generation 3: %+v", st)
	}
}

// TestRunnerCancel: desired Cancel calls Cancel (never Evacuate), reports
// InProgress until done, then Cancelled for the new generation; a
// Completed of the Evacuate generation does not stop it.
func TestRunnerCancel(t *testing.T) {
	completed := v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCompleted, ObservedGeneration: 1,
		HeartbeatTime: &metav1.Time{Time: time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)}}
	f := newFixture(t, evac("node-1.store", me, v1alpha1.DesiredCancel, 2, completed))

	f.provider.answer(evacuation.Progress{Remaining: 1, Message: "removing the extra replica"}, nil)
	res, err := f.reconcile(t, "node-1.store")
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.provider.asked(), "Cancel node-1")
	if st := f.get(t, "node-1.store").Status; st.Phase != v1alpha1.EvacuationInProgress || st.ObservedGeneration != 2 || res.RequeueAfter != heartbeat {
		t.Errorf("cancel under way: status %+v, requeue %s", st, res.RequeueAfter)
	}

	f.clock.SetTime(f.clock.Now().Add(heartbeat))
	f.provider.answer(evacuation.Progress{Done: true, Message: "node eligible again"}, nil)
	res, err = f.reconcile(t, "node-1.store")
	if err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.provider.asked(), "Cancel node-1")
	st := f.get(t, "node-1.store").Status
	if st.Phase != v1alpha1.EvacuationCancelled || st.ObservedGeneration != 2 || st.Message != "node eligible again" || !res.IsZero() {
		t.Errorf("cancel done: status %+v, result %+v", st, res)
	}

	f.provider.answer(evacuation.Progress{Done: true}, nil)
	if _, err := f.reconcile(t, "node-1.store"); err != nil {
		t.Fatal(err)
	}
	wantCalls(t, f.provider.asked()) // Cancelled is final
}

// TestRunnerWritesOnlyChanges: a step that reports the same as the status
// already says, at the same time, writes nothing; a later heartbeat writes
// again (that is what keeps the drain from calling the provider stale).
func TestRunnerWritesOnlyChanges(t *testing.T) {
	f := newFixture(t, evac("node-1.store", me, v1alpha1.DesiredEvacuate, 1, v1alpha1.EvacuationStatus{}))
	f.provider.answer(evacuation.Progress{Remaining: 4, Message: "copying"}, nil)
	for range 2 {
		if _, err := f.reconcile(t, "node-1.store"); err != nil {
			t.Fatal(err)
		}
	}
	if f.writes != 2 { // "taken up" before the first step, then its report
		t.Errorf("%d status writes for two identical steps at the same time, want 2", f.writes)
	}
	rv := f.get(t, "node-1.store").ResourceVersion

	f.clock.SetTime(f.clock.Now().Add(heartbeat))
	if _, err := f.reconcile(t, "node-1.store"); err != nil {
		t.Fatal(err)
	}
	ev := f.get(t, "node-1.store")
	if f.writes != 3 || ev.ResourceVersion == rv || !ev.Status.HeartbeatTime.Time.Equal(f.clock.Now()) {
		t.Errorf("the heartbeat was not written after %s: writes %d, heartbeat %v", heartbeat, f.writes, ev.Status.HeartbeatTime)
	}
}

// TestRunnerIgnoresOthers: Evacuations of other providers, ones being
// deleted and ones that are gone are neither stepped nor written.
func TestRunnerIgnoresOthers(t *testing.T) {
	deleting := evac("deleting", me, v1alpha1.DesiredEvacuate, 1, v1alpha1.EvacuationStatus{})
	deleting.Finalizers = []string{"test/hold"}
	f := newFixture(t, evac("theirs", "other-store", v1alpha1.DesiredEvacuate, 1, v1alpha1.EvacuationStatus{}), deleting)
	if err := f.client.Delete(context.Background(), deleting); err != nil {
		t.Fatal(err)
	}
	f.provider.answer(evacuation.Progress{Done: true}, nil)
	for _, name := range []string{"theirs", "deleting", "gone"} {
		res, err := f.reconcile(t, name)
		if err != nil || !res.IsZero() {
			t.Errorf("%s: got %+v, %v; want nothing", name, res, err)
		}
	}
	wantCalls(t, f.provider.asked())
	if f.writes != 0 {
		t.Errorf("%d status write(s) to Evacuations that are not ours to answer", f.writes)
	}
	if st := f.get(t, "theirs").Status; st.Phase != "" {
		t.Errorf("another provider's Evacuation got status %+v", st)
	}
}

// TestRunnerMessageBounded: a long message is cut to the API's 2048.
func TestRunnerMessageBounded(t *testing.T) {
	f := newFixture(t, evac("node-1.store", me, v1alpha1.DesiredEvacuate, 1, v1alpha1.EvacuationStatus{}))
	f.provider.answer(evacuation.Progress{}, evacuation.Failed(errors.New(strings.Repeat("x", 3000))))
	if _, err := f.reconcile(t, "node-1.store"); err != nil {
		t.Fatal(err)
	}
	if m := f.get(t, "node-1.store").Status.Message; len(m) != 2048 || !strings.HasSuffix(m, "...") {
		t.Errorf("message of %d characters (suffix %q), want 2048 ending in ...", len(m), m[len(m)-3:])
	}
}

// TestRunnerWriteErrors: a failed status write is returned (for a retry
// with backoff); an Evacuation deleted meanwhile is not an error.
func TestRunnerWriteErrors(t *testing.T) {
	f := newFixture(t, evac("node-1.store", me, v1alpha1.DesiredEvacuate, 1, v1alpha1.EvacuationStatus{}))
	f.provider.answer(evacuation.Progress{Remaining: 1}, nil)
	f.failPatch = apierrors.NewServiceUnavailable("etcd is away")
	if _, err := f.reconcile(t, "node-1.store"); !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "reporting evacuation node-1.store") {
		t.Errorf("got %v, want the write's error with context", err)
	}
	f.failPatch = apierrors.NewNotFound(schema.GroupResource{Group: "vacate.dev", Resource: "evacuations"}, "node-1.store")
	if res, err := f.reconcile(t, "node-1.store"); err != nil {
		t.Errorf("deleted meanwhile: got %+v, %v; want no error", res, err)
	}
}

func TestIsFailed(t *testing.T) {
	base := errors.New("disk full")
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{evacuation.Failed(base), true},
		{fmt.Errorf("step 3: %w", evacuation.Failed(base)), true},
		{base, false},
		{nil, false},
	} {
		if got := evacuation.IsFailed(tc.err); got != tc.want {
			t.Errorf("IsFailed(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if !errors.Is(evacuation.Failed(base), base) {
		t.Error("Failed hides the cause from errors.Is")
	}
}

// TestRegister creates the provider's registration, then updates it in place.
func TestRegister(t *testing.T) {
	s, err := evacuation.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).Build()
	spec := v1alpha1.EvacuationProviderSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "store"}}}
	if err := evacuation.Register(context.Background(), c, "store", spec); err != nil {
		t.Fatal(err)
	}
	spec.Stage = v1alpha1.StageAfterEviction
	if err := evacuation.Register(context.Background(), c, "store", spec); err != nil {
		t.Fatal(err)
	}
	got := &v1alpha1.EvacuationProvider{}
	if err := c.Get(context.Background(), client.ObjectKey{Name: "store"}, got); err != nil || got.Spec.Stage != v1alpha1.StageAfterEviction ||
		got.Spec.PodSelector.MatchLabels["app"] != "store" {
		t.Errorf("registration %+v (%v), want the second spec", got.Spec, err)
	}
}
