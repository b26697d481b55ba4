package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

// planJSON is what the tests read of `vacate plan -o json`: the contract
// scripts rely on, spelled out by field name.
type planJSON struct {
	Node string `json:"node"`
	Mode string `json:"mode"`
	Pods []struct {
		Pod                string   `json:"pod"`
		Action             string   `json:"action"`
		Next               string   `json:"next"`
		HeldBy             []string `json:"heldBy"`
		IgnoredAnnotations []string `json:"ignoredAnnotations"`
		BlockedNow         bool     `json:"blockedNow"`
		Surge              *struct {
			Surged bool   `json:"surged"`
			Why    string `json:"why"`
		} `json:"surge"`
	} `json:"pods"`
	Hooks     []string `json:"hooks"`
	HTTPHooks []struct {
		Pod    string `json:"pod"`
		Called bool   `json:"called"`
		URL    string `json:"url"`
		Holds  bool   `json:"holds"`
		Why    string `json:"why"`
	} `json:"httpHooks"`
	Providers []struct {
		Name                    string   `json:"name"`
		Stage                   string   `json:"stage"`
		Modes                   []string `json:"modes"`
		Asked                   bool     `json:"asked"`
		Evacuation              string   `json:"evacuation"`
		Pods                    []string `json:"pods"`
		Holds                   bool     `json:"holds"`
		HeartbeatTimeoutSeconds float64  `json:"heartbeatTimeoutSeconds"`
		Why                     string   `json:"why"`
	} `json:"evacuationProviders"`
	Evacuations []struct {
		Name         string   `json:"name"`
		Provider     string   `json:"provider"`
		Phase        string   `json:"phase"`
		CurrentDrain bool     `json:"currentDrain"`
		PodsOnNode   []string `json:"podsOnNode"`
		Holds        bool     `json:"holds"`
	} `json:"evacuations"`
	Held     []string `json:"held"`
	Blocked  []string `json:"blocked"`
	Estimate struct {
		Evictions                int     `json:"evictions"`
		LowSeconds               float64 `json:"lowSeconds"`
		HighSeconds              float64 `json:"highSeconds"`
		Finishes                 bool    `json:"finishes"`
		EvacuationsBefore        int     `json:"evacuationsBefore"`
		EvacuationsAfter         int     `json:"evacuationsAfter"`
		HeldPods                 int     `json:"heldPods"`
		EvacuationTimeoutSeconds float64 `json:"evacuationTimeoutSeconds"`
	} `json:"estimate"`
}

// planOf runs plan -o json for one node.
func planOf(t *testing.T, u user, node string, args ...string) planJSON {
	t.Helper()
	var plans []planJSON
	out := u.must(ExitOK, append([]string{"plan", node, "-o", "json"}, args...)...)
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("plan -o json: %v (%d plans)", err, len(plans))
	}
	return plans[0]
}

// labelNamespace adds labels to a namespace.
func labelNamespace(t *testing.T, c *devcluster.Cluster, ns string, add map[string]string) {
	t.Helper()
	ctx := testenv.Context(t)
	obj, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range add {
		obj.Labels[k] = v
	}
	if _, err := c.Client.CoreV1().Namespaces().Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// appOn runs a Deployment of replicas pods pinned to node, with annotations
// on its pods, and returns them once Ready.
func appOn(t *testing.T, c *devcluster.Cluster, ns, name, node string, replicas int32, annotations map[string]string) []corev1.Pod {
	t.Helper()
	ctx := testenv.Context(t)
	d := devcluster.Deployment(ns, name, replicas)
	d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	d.Spec.Template.Annotations = annotations
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: name}), int(replicas), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return pods
}

func createObject(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	if err := cl.Create(testenv.Context(t), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), obj) })
}

// TestPlanCallsHooksAsTheControllerDoes: plan says, per pod with the HTTP
// hook annotations, whether the controller calls its hook and where, or why
// not (httpHooks off, its namespace not selected by
// httpHooks.namespaceSelector, its annotations ignored outside
// pods.annotationNamespaceSelector, an address vacate never calls); a
// vacate.dev/drain: skip outside pods.annotationNamespaceSelector is not
// honoured, as the controller does not honour it. The real drain then calls
// exactly the hooks plan said, and evicts the pod whose skip plan ignored.
func TestPlanCallsHooksAsTheControllerDoes(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c) // with --allow-loopback-hooks: the dev cluster's pods live on 127.0.0.0/8
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-hooks", Count: 1, Labels: map[string]string{"pool": "cli-hooks"}})[0]
	h := newHookScene(t, c, cl, node)
	// plan reads namespaces' labels here: vacate-user is enough.
	alice := newUser(t, c, "hooks-planner")
	bindUserRole(t, c, "hooks-planner")

	// As text, without --allow-loopback-hooks: the hook is refused (the
	// pod's address is loopback), the others say why they are not called.
	h.checkText(t, alice.must(ExitOK, "plan", node))

	// As JSON, planned for a controller run with --allow-loopback-hooks.
	hooks := h.checkJSON(t, planOf(t, alice, node, "--allow-loopback-hooks"))

	// Under a policy without httpHooks, no hook is called.
	off := planOf(t, alice, node, "--allow-loopback-hooks", "--policy", "cli-hooks-off")
	for _, hp := range off.HTTPHooks {
		if hp.Called || !strings.Contains(hp.Why, "httpHooks.enabled is false in DrainPolicy cli-hooks-off") {
			t.Errorf("under httpHooks disabled, hook of %s: called=%t why=%q", hp.Pod, hp.Called, hp.Why)
		}
	}
	if len(off.HTTPHooks) != 3 || off.Estimate.HeldPods != 0 {
		t.Errorf("under httpHooks disabled: %d hooks listed, %d held pods; want 3, 0", len(off.HTTPHooks), off.Estimate.HeldPods)
	}

	// The real drain calls exactly the hooks plan said, evicts the pod whose
	// skip plan ignored and keeps the one whose skip it honoured.
	alice.must(ExitOK, "drain", node)
	t.Cleanup(func() { alice.vacate("cancel", node) })
	h.checkDrainCallsPlannedHooks(t, c, cl, node, hooks)
}

// hookScene is what TestPlanCallsHooksAsTheControllerDoes runs: three
// namespaces, selected by the DrainPolicy cli-hooks for both hooks and
// annotations, for hooks only, for annotations only; the pods of five apps
// on the node (called, not-selected, ignored: with the hook annotations;
// kept, lying: annotated skip); and the DrainPolicy cli-hooks-off, with no
// httpHooks.
type hookScene struct {
	both, hooksOnly, annotationsOnly string
	called, kept, lying              corev1.Pod
}

func newHookScene(t *testing.T, c *devcluster.Cluster, cl client.Client, node string) hookScene {
	t.Helper()
	h := hookScene{both: testenv.Namespace(t, c), hooksOnly: testenv.Namespace(t, c), annotationsOnly: testenv.Namespace(t, c)}
	labelNamespace(t, c, h.both, map[string]string{"test.vacate.dev/hooks": "yes", "test.vacate.dev/annotations": "yes"})
	labelNamespace(t, c, h.hooksOnly, map[string]string{"test.vacate.dev/hooks": "yes"})
	labelNamespace(t, c, h.annotationsOnly, map[string]string{"test.vacate.dev/annotations": "yes"})
	createObject(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-hooks"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cli-hooks"}},
		Pods:         v1alpha1.PodPolicy{AnnotationNamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test.vacate.dev/annotations": "yes"}}},
		HTTPHooks: v1alpha1.HTTPHooks{Enabled: true,
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test.vacate.dev/hooks": "yes"}}},
	}})
	createObject(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-hooks-off"}})

	hooked := map[string]string{"vacate.dev/evacuate-port": "18080", "vacate.dev/evacuate-path": "/move"}
	skip := map[string]string{"vacate.dev/drain": "skip"}
	h.called = appOn(t, c, h.both, "called", node, 1, hooked)[0]
	appOn(t, c, h.annotationsOnly, "not-selected", node, 1, hooked)
	appOn(t, c, h.hooksOnly, "ignored", node, 1, hooked)
	h.kept = appOn(t, c, h.both, "kept", node, 1, skip)[0]
	h.lying = appOn(t, c, h.hooksOnly, "lying", node, 1, skip)[0]
	return h
}

func (h hookScene) calledKey() string { return h.both + "/" + h.called.Name }
func (h hookScene) lyingKey() string  { return h.hooksOnly + "/" + h.lying.Name }

// checkText checks plan's text, planned without --allow-loopback-hooks:
// the called pod's hook is refused for its loopback address, the others
// say why they are not called, the skip outside
// pods.annotationNamespaceSelector is evicted and the honoured one skipped.
func (h hookScene) checkText(t *testing.T, text string) {
	t.Helper()
	if strings.Contains(text, "not run by this version") {
		t.Errorf("plan says hooks are not run by this version of vacate")
	}
	for _, want := range []string{
		"HTTP hook of " + h.calledKey() + ": vacate does not call the HTTP hook of pod " + h.calledKey() + " at " + h.called.Status.PodIP,
		"--allow-loopback-hooks",
		"namespace " + h.annotationsOnly + " is not selected by the httpHooks.namespaceSelector of DrainPolicy cli-hooks",
		"namespace " + h.hooksOnly + " is not selected by the pods.annotationNamespaceSelector of DrainPolicy cli-hooks",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}
	pods := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) >= 2 {
			pods[f[0]] = f[1]
		}
	}
	if got := pods[h.lyingKey()]; got != "Evict" {
		t.Errorf("plan says %s for %s, annotated skip in a namespace outside pods.annotationNamespaceSelector; the controller evicts it", got, h.lyingKey())
	}
	if got := pods[h.both+"/"+h.kept.Name]; got != "Skip" {
		t.Errorf("plan says %s for %s, annotated skip where the policy honours it; want Skip", got, h.both+"/"+h.kept.Name)
	}
}

// checkJSON checks plan -o json, planned with --allow-loopback-hooks: only
// the called pod's hook is called, at its address, and holds it; the
// others say why not; the ignored skip is evicted, its annotation listed as
// ignored; the estimate counts the one evacuation and held pod. It returns
// whether plan calls each hook, by pod.
func (h hookScene) checkJSON(t *testing.T, p planJSON) map[string]bool {
	t.Helper()
	calledKey := h.calledKey()
	hooks := map[string]bool{}
	for _, hp := range p.HTTPHooks {
		hooks[hp.Pod] = hp.Called
		switch {
		case hp.Pod == calledKey:
			if want := fmt.Sprintf("http://%s:18080/move", h.called.Status.PodIP); !hp.Called || hp.URL != want || !hp.Holds {
				t.Errorf("hook of %s: called=%t url=%q holds=%t; want called at %s, holding the pod", hp.Pod, hp.Called, hp.URL, hp.Holds, want)
			}
		case hp.Called || hp.Holds || hp.Why == "":
			t.Errorf("hook of %s: called=%t holds=%t why=%q; want not called, not holding, and why", hp.Pod, hp.Called, hp.Holds, hp.Why)
		}
	}
	if len(hooks) != 3 || !hooks[calledKey] {
		t.Errorf("plan lists the hooks %v; want the three annotated pods, %s called", hooks, calledKey)
	}
	for _, pp := range p.Pods {
		switch pp.Pod {
		case calledKey:
			if !slices.Contains(pp.HeldBy, "HTTP hook of pod "+calledKey) {
				t.Errorf("pod %s held by %v; want its HTTP hook", pp.Pod, pp.HeldBy)
			}
		case h.lyingKey():
			if pp.Action != "Evict" || !slices.Contains(pp.IgnoredAnnotations, "vacate.dev/drain=skip") {
				t.Errorf("pod %s: %s, ignored annotations %v; want Evict, vacate.dev/drain=skip ignored", pp.Pod, pp.Action, pp.IgnoredAnnotations)
			}
		}
	}
	if p.Estimate.EvacuationsBefore != 1 || p.Estimate.HeldPods != 1 || !slices.Contains(p.Held, calledKey) {
		t.Errorf("estimate: %d evacuation(s) before eviction, %d held pod(s), held %v; want 1, 1, [%s]",
			p.Estimate.EvacuationsBefore, p.Estimate.HeldPods, p.Held, calledKey)
	}
	return hooks
}

// checkDrainCallsPlannedHooks: the node's drain, requested, calls exactly
// the hooks plan said it calls (hooks), evicts the pod whose skip plan
// ignored and keeps the one whose skip it honoured.
func (h hookScene) checkDrainCallsPlannedHooks(t *testing.T, c *devcluster.Cluster, cl client.Client, node string, hooks map[string]bool) {
	t.Helper()
	nd := testenv.WaitForDrain(t, cl, node, "calling its hooks, the ignored skip evicted", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		_, err := c.Client.CoreV1().Pods(h.hooksOnly).Get(context.Background(), h.lying.Name, metav1.GetOptions{})
		return len(nd.Status.Hooks) > 0 && err != nil
	}, testenv.DescribeDrain)
	var drainCalled, planCalled []string
	for _, hs := range nd.Status.Hooks {
		if name, ok := strings.CutPrefix(hs.Name, "pod/"); ok {
			drainCalled = append(drainCalled, name)
		}
	}
	for pod, yes := range hooks {
		if yes {
			planCalled = append(planCalled, pod)
		}
	}
	sort.Strings(drainCalled)
	sort.Strings(planCalled)
	if !slices.Equal(drainCalled, planCalled) {
		t.Errorf("the drain calls the hooks of %v; plan said %v", drainCalled, planCalled)
	}
	if got, err := c.Client.CoreV1().Pods(h.both).Get(context.Background(), h.kept.Name, metav1.GetOptions{}); err != nil || got.UID != h.kept.UID || got.DeletionTimestamp != nil {
		t.Errorf("the pod annotated skip where the policy honours it did not stay: %v", err)
	}
}

// TestPlanListsProvidersAndTheirEvacuations: plan lists the
// EvacuationProviders a drain would ask (those that protect a leaving pod;
// in Decommission every one that takes part), with the pods each holds,
// its stage and modes, and why the others are not asked (being deleted,
// another mode, nothing of theirs leaves); its estimate counts the
// evacuations and the pods that wait for them, and says what bounds them.
// The real drain then creates exactly those Evacuations, protecting those
// pods, and plan lists them as the node's Evacuations.
func TestPlanListsProvidersAndTheirEvacuations(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-evp", Count: 1, Labels: map[string]string{"pool": "cli-evp"}})[0]
	dbKeys, webKey := newProvidersScene(t, c, cl, node)
	// plan lists providers and Evacuations and reads namespaces' labels:
	// vacate-user is enough.
	alice := newUser(t, c, "evp-planner")
	bindUserRole(t, c, "evp-planner")

	text := alice.must(ExitOK, "plan", node)
	for _, want := range []string{
		"EvacuationProvider cli-evp-before",
		"EvacuationProvider cli-evp-deleting: not asked: being deleted",
		"only once their evacuation Completed",
		"timeouts.evacuation (15m0s)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("plan output lacks %q", want)
		}
	}

	p := planOf(t, alice, node)
	checkProviders(t, p, node, map[string]providerWant{
		"cli-evp-before":    {asked: true, pods: dbKeys, holds: true},
		"cli-evp-maint":     {asked: true, pods: dbKeys, holds: true},
		"cli-evp-after":     {asked: true, pods: []string{webKey}, why: "AfterEviction"},
		"cli-evp-decom":     {why: "takes part only in Decommission"},
		"cli-evp-elsewhere": {why: "protects none of the pods"},
		"cli-evp-deleting":  {why: "being deleted"},
	})
	checkMaintenancePlanHolds(t, p, node, dbKeys)

	decom := planOf(t, alice, node, "--mode", "Decommission")
	checkProviders(t, decom, node, map[string]providerWant{
		"cli-evp-before":    {asked: true, pods: dbKeys, holds: true},
		"cli-evp-maint":     {why: "takes part only in Maintenance"},
		"cli-evp-after":     {asked: true, pods: []string{webKey}, why: "AfterEviction"},
		"cli-evp-decom":     {asked: true, why: "Decommission"},
		"cli-evp-elsewhere": {asked: true, why: "Decommission"},
		"cli-evp-deleting":  {why: "being deleted"},
	})

	// The real drain asks exactly the providers plan said, for those pods.
	alice.must(ExitOK, "drain", node)
	t.Cleanup(func() { alice.vacate("cancel", node) })
	asked := checkDrainAsksAsPlanned(t, cl, node, p)

	// Planned again, the node's Evacuations are listed, the ones before
	// eviction hold their pods, and each pod the drain reports held is held
	// in the plan by the same holder first (one model of holds).
	checkPlanListsTheEvacuations(t, cl, alice, node, asked, dbKeys)
}

// newProvidersScene runs, on the node, a namespace's two pods of
// cli-evp-db and one of cli-evp-web, under the DrainPolicy cli-evp
// (timeouts.evacuation 15m), with the EvacuationProviders of the test: one
// before eviction (for the db pods, heartbeat timeout 30s), one after (for
// web), one for Decommission only (protecting nothing), one for
// Maintenance only (db), one selecting another namespace, and one being
// deleted (held by a finalizer of the test). It returns the db pods' and
// the web pod's namespace/name.
func newProvidersScene(t *testing.T, c *devcluster.Cluster, cl client.Client, node string) ([]string, string) {
	t.Helper()
	ns := testenv.Namespace(t, c)
	labelNamespace(t, c, ns, map[string]string{"test.vacate.dev/evp": "yes"})
	createObject(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-evp"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cli-evp"}},
		Timeouts:     v1alpha1.Timeouts{Evacuation: &metav1.Duration{Duration: 15 * time.Minute}},
	}})
	dbs := appOn(t, c, ns, "cli-evp-db", node, 2, nil)
	webs := appOn(t, c, ns, "cli-evp-web", node, 1, nil)
	var dbKeys []string
	for _, p := range dbs {
		dbKeys = append(dbKeys, ns+"/"+p.Name)
	}
	sort.Strings(dbKeys)

	inTest := &metav1.LabelSelector{MatchLabels: map[string]string{"test.vacate.dev/evp": "yes"}}
	provider := func(name, app string, spec v1alpha1.EvacuationProviderSpec) *v1alpha1.EvacuationProvider {
		spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{devcluster.AppLabel: app}}
		if spec.NamespaceSelector == nil {
			spec.NamespaceSelector = inTest
		}
		p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
		createObject(t, cl, p)
		return p
	}
	provider("cli-evp-before", "cli-evp-db", v1alpha1.EvacuationProviderSpec{Timeout: &metav1.Duration{Duration: 30 * time.Second}})
	provider("cli-evp-after", "cli-evp-web", v1alpha1.EvacuationProviderSpec{Stage: v1alpha1.StageAfterEviction})
	provider("cli-evp-decom", "cli-evp-nothing", v1alpha1.EvacuationProviderSpec{Modes: []v1alpha1.DrainMode{v1alpha1.ModeDecommission}})
	provider("cli-evp-maint", "cli-evp-db", v1alpha1.EvacuationProviderSpec{Modes: []v1alpha1.DrainMode{v1alpha1.ModeMaintenance}})
	provider("cli-evp-elsewhere", "cli-evp-db", v1alpha1.EvacuationProviderSpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"test.vacate.dev/evp": "elsewhere"}}})
	deleteHeld(t, cl, provider("cli-evp-deleting", "cli-evp-db", v1alpha1.EvacuationProviderSpec{}))
	return dbKeys, ns + "/" + webs[0].Name
}

// deleteHeld deletes the provider, held by a finalizer of the test until
// the test ends.
func deleteHeld(t *testing.T, cl client.Client, deleting *v1alpha1.EvacuationProvider) {
	t.Helper()
	ctx := testenv.Context(t)
	// The controller adds vacate.dev/evacuations to every new provider
	// meanwhile: read again on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := cl.Get(ctx, types.NamespacedName{Name: deleting.Name}, deleting); err != nil {
			return err
		}
		deleting.Finalizers = append(deleting.Finalizers, "test.vacate.dev/hold")
		return cl.Update(ctx, deleting)
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			p := &v1alpha1.EvacuationProvider{}
			if err := cl.Get(context.Background(), types.NamespacedName{Name: deleting.Name}, p); err != nil {
				return client.IgnoreNotFound(err)
			}
			p.Finalizers = slices.DeleteFunc(p.Finalizers, func(f string) bool { return f == "test.vacate.dev/hold" })
			return cl.Update(context.Background(), p)
		})
	})
	if err := cl.Delete(ctx, deleting); err != nil {
		t.Fatal(err)
	}
}

// providerWant is what a plan should say of one provider: whether it is
// asked, the pods it protects, whether it holds them, and a part of why.
type providerWant struct {
	asked bool
	pods  []string
	holds bool
	why   string
}

// checkProviders checks what the plan says of each provider of wants (it
// lists them all; others are other tests'), and that each one asked names
// the node's Evacuation of it.
func checkProviders(t *testing.T, p planJSON, node string, wants map[string]providerWant) {
	t.Helper()
	seen := map[string]bool{}
	for _, pp := range p.Providers {
		w, ok := wants[pp.Name]
		if !ok {
			continue // another test's
		}
		seen[pp.Name] = true
		pods := slices.Clone(pp.Pods)
		sort.Strings(pods)
		if pp.Asked != w.asked || !slices.Equal(pods, w.pods) || pp.Holds != w.holds || !strings.Contains(pp.Why, w.why) {
			t.Errorf("%s plan, provider %s: asked=%t pods=%v holds=%t why=%q; want asked=%t pods=%v holds=%t why containing %q",
				p.Mode, pp.Name, pp.Asked, pods, pp.Holds, pp.Why, w.asked, w.pods, w.holds, w.why)
		}
		if pp.Asked && pp.Evacuation != v1alpha1.EvacuationName(node, pp.Name) {
			t.Errorf("provider %s: Evacuation %q, want %q", pp.Name, pp.Evacuation, v1alpha1.EvacuationName(node, pp.Name))
		}
	}
	if len(seen) != len(wants) {
		t.Errorf("%s plan lists %d of the test's %d providers: %v", p.Mode, len(seen), len(wants), seen)
	}
}

// checkMaintenancePlanHolds checks the Maintenance plan's holds: the
// provider before eviction has its heartbeat timeout and stage, its
// Evacuation holds exactly the db pods, and the estimate counts the held
// pods, the evacuations before and after eviction, and timeouts.evacuation.
func checkMaintenancePlanHolds(t *testing.T, p planJSON, node string, dbKeys []string) {
	t.Helper()
	for _, pp := range p.Providers {
		if pp.Name == "cli-evp-before" && (pp.HeartbeatTimeoutSeconds != 30 || pp.Stage != string(v1alpha1.StageBeforeEviction)) {
			t.Errorf("provider %s: heartbeat timeout %vs, stage %s; want 30s, BeforeEviction", pp.Name, pp.HeartbeatTimeoutSeconds, pp.Stage)
		}
	}
	var held []string
	for _, pp := range p.Pods {
		if slices.Contains(pp.HeldBy, "Evacuation "+v1alpha1.EvacuationName(node, "cli-evp-before")) {
			held = append(held, pp.Pod)
		}
	}
	sort.Strings(held)
	if !slices.Equal(held, dbKeys) {
		t.Errorf("pods held by cli-evp-before's Evacuation: %v, want %v", held, dbKeys)
	}
	e := p.Estimate
	if e.HeldPods != len(dbKeys) || e.EvacuationTimeoutSeconds != 900 || e.EvacuationsBefore < 2 || e.EvacuationsAfter < 1 {
		t.Errorf("estimate: %d held pod(s), timeouts.evacuation %vs, %d evacuation(s) before and %d after eviction; want %d, 900s, at least 2 and 1",
			e.HeldPods, e.EvacuationTimeoutSeconds, e.EvacuationsBefore, e.EvacuationsAfter, len(dbKeys))
	}
}

// checkDrainAsksAsPlanned: the node's drain, requested, creates the
// Evacuations of exactly the providers plan p asked, protecting the pods
// it said. It returns the pods of each provider asked.
func checkDrainAsksAsPlanned(t *testing.T, cl client.Client, node string, p planJSON) map[string][]string {
	t.Helper()
	asked := map[string][]string{}
	for _, pp := range p.Providers {
		if pp.Asked {
			asked[pp.Name] = slices.Sorted(slices.Values(pp.Pods))
		}
	}
	got := map[string][]string{}
	testenv.WaitForDrain(t, cl, node, "with its Evacuations", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		list := &v1alpha1.EvacuationList{}
		if cl.List(context.Background(), list) != nil {
			return false
		}
		got = map[string][]string{}
		for _, ev := range list.Items {
			if ev.Spec.NodeName != node || ev.Spec.DrainUID != string(nd.UID) {
				continue
			}
			pods := []string{}
			for _, pp := range ev.Spec.ProtectedPods {
				pods = append(pods, pp.Namespace+"/"+pp.Name)
			}
			got[ev.Spec.Provider] = slices.Sorted(slices.Values(pods))
		}
		return len(got) >= len(asked)
	}, testenv.DescribeDrain)
	if fmt.Sprint(got) != fmt.Sprint(asked) {
		t.Errorf("the drain's Evacuations protect %v; plan said %v", got, asked)
	}
	return asked
}

// checkPlanListsTheEvacuations plans the node again once its drain reports
// the db pods held: each pod the drain reports held is held in the plan by
// the same holder first (one model of holds), the Evacuation of
// cli-evp-before is this drain's, Pending, holding the db pods, and every
// provider asked has its Evacuation listed.
func checkPlanListsTheEvacuations(t *testing.T, cl client.Client, u user, node string, asked map[string][]string, dbKeys []string) {
	t.Helper()
	nd := testenv.WaitForDrain(t, cl, node, "reporting its held pods", time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		n := 0
		for _, b := range nd.Status.Blockers {
			if b.Reason == v1alpha1.BlockerEvacuation {
				n++
			}
		}
		return n == len(dbKeys)
	}, testenv.DescribeDrain)
	again := planOf(t, u, node)
	for _, b := range nd.Status.Blockers {
		for _, pp := range again.Pods {
			if pp.Pod == b.Pod && (len(pp.HeldBy) == 0 || pp.HeldBy[0] != b.Holder) {
				t.Errorf("pod %s: the drain reports it held by %q, the plan by %q", b.Pod, b.Holder, pp.HeldBy)
			}
		}
	}
	evacs := map[string]bool{}
	for _, ev := range again.Evacuations {
		evacs[ev.Provider] = true
		if ev.Provider == "cli-evp-before" && (!ev.CurrentDrain || !ev.Holds || ev.Phase != string(v1alpha1.EvacuationPending) ||
			!slices.Equal(slices.Sorted(slices.Values(ev.PodsOnNode)), dbKeys)) {
			t.Errorf("Evacuation %s: current drain %t, holds %t, phase %s, pods %v; want this drain's, holding %v, Pending",
				ev.Name, ev.CurrentDrain, ev.Holds, ev.Phase, ev.PodsOnNode, dbKeys)
		}
	}
	for name := range asked {
		if !evacs[name] {
			t.Errorf("plan does not list the Evacuation of provider %s among the node's", name)
		}
	}
}

// TestPlanSaysWhichPodsAreSurged: under a DrainPolicy that surges, plan
// says which pods leave only after a replacement is Ready elsewhere (a
// one-replica Deployment whose PDB allows no disruption, one without a
// PDB), which wait because they cannot be surged and why (a StatefulSet's,
// a Deployment of strategy Recreate, one annotated out), and which need
// no surge (a PDB that allows the eviction). vacate-user may read what it
// takes.
func TestPlanSaysWhichPodsAreSurged(t *testing.T) {
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	cl := testenv.DrainClient(t, c)
	node := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "cli-surge", Count: 1, Labels: map[string]string{"pool": "cli-surge"}})[0]
	ns := testenv.Namespace(t, c)
	createObject(t, cl, &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "cli-surge"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "cli-surge"}},
		Surge:        v1alpha1.Surge{Pods: v1alpha1.SurgeAll}}})
	pdb := func(app, minAvailable string) {
		if _, err := c.Client.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, devcluster.PDB(ns, app, app, minAvailable, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	surged := appOn(t, c, ns, "surged", node, 1, nil)[0]
	pdb("surged", "1")
	alone := appOn(t, c, ns, "alone", node, 1, nil)[0]
	optedOut := appOn(t, c, ns, "opted-out", node, 1, map[string]string{"vacate.dev/surge": "false"})[0]
	pdb("opted-out", "1")
	roomy := appOn(t, c, ns, "roomy", node, 2, nil)
	pdb("roomy", "1")
	recreate := devcluster.Deployment(ns, "recreate", 1)
	recreate.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	recreate.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, recreate, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb("recreate", "1")
	sts := devcluster.StatefulSet(ns, "db", 1)
	sts.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: node}
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pdb("db", "1")
	for _, app := range []string{"recreate", "db", "surged", "opted-out", "roomy"} {
		if _, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: app}), 1, time.Minute); err != nil {
			t.Fatal(err)
		}
		want := int32(1)
		if app == "roomy" {
			want = 2
		}
		if _, err := devcluster.WaitForPDB(ctx, c.Client, ns, app, want, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	bob := newUser(t, c, "surge-planner")
	bindUserRole(t, c, "surge-planner")
	p := planOf(t, bob, node)
	got := map[string]string{}
	for _, pp := range p.Pods {
		switch {
		case pp.Surge == nil:
			got[pp.Pod] = fmt.Sprintf("no surge, blocked %t", pp.BlockedNow)
		default:
			got[pp.Pod] = fmt.Sprintf("surged %t, blocked %t: %s", pp.Surge.Surged, pp.BlockedNow, pp.Surge.Why)
		}
	}
	key := func(p corev1.Pod) string { return ns + "/" + p.Name }
	want := map[string]string{
		key(surged):   "surged true, blocked false: its PodDisruptionBudget allows no disruption now",
		key(alone):    "surged true, blocked false: no PodDisruptionBudget guards it and it is the only ready pod of Deployment alone",
		key(optedOut): `surged false, blocked true: annotated vacate.dev/surge: "false"`,
		key(roomy[0]): "no surge, blocked false",
		ns + "/db-0":  "surged false, blocked true: a StatefulSet's pod has a stable identity",
	}
	for pod, w := range want {
		if !strings.HasPrefix(got[pod], w) {
			t.Errorf("plan for %s: %q, want %q", pod, got[pod], w)
		}
	}
	for pod, g := range got {
		if strings.HasPrefix(pod, ns+"/recreate-") && !strings.HasPrefix(g, "surged false, blocked true: Deployment recreate has strategy Recreate") {
			t.Errorf("plan for %s: %q, want it not surged (strategy Recreate)", pod, g)
		}
	}
	text := bob.must(ExitOK, "plan", node)
	if !strings.Contains(text, "surged, a replacement Ready elsewhere first: its PodDisruptionBudget allows no disruption now") ||
		!strings.Contains(text, "waits, not surged: a StatefulSet's pod has a stable identity") {
		t.Errorf("plan's text does not say which pods are surged:\n%s", text)
	}
}
