package v1alpha1_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// apiClient installs the CRDs into the package's dev cluster and returns a
// client for vacate's types.
func apiClient(t *testing.T) (client.Client, *devcluster.Cluster) {
	t.Helper()
	c := testenv.Start(t)
	ctx := testenv.Context(t)
	if err := devcluster.InstallCRDs(ctx, c.RESTConfig); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(c.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl, c
}

func nodeDrain(name, node string) *v1alpha1.NodeDrain {
	return &v1alpha1.NodeDrain{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.NodeDrainSpec{
			NodeName:   node,
			Requesters: []v1alpha1.Requester{{Name: "cli:test", Reason: "kernel upgrade"}},
		},
	}
}

// wantRejected fails unless err is the API server's rejection containing msg.
func wantRejected(t *testing.T, what string, err error, msg string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want rejected with %q", what, msg)
		return
	}
	if !strings.Contains(err.Error(), msg) {
		t.Errorf("%s: rejected with %q, want the message to contain %q", what, err, msg)
		return
	}
	t.Logf("%s: rejected: %v", what, err)
}

func TestNodeDrainValidation(t *testing.T) {
	cl, _ := apiClient(t)
	ctx := testenv.Context(t)

	nd := nodeDrain("valid-node", "valid-node")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatalf("valid NodeDrain rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, nd) })
	if nd.Spec.Mode != v1alpha1.ModeMaintenance {
		t.Errorf("mode defaulted to %q, want %q", nd.Spec.Mode, v1alpha1.ModeMaintenance)
	}

	wantRejected(t, "name differs from nodeName", cl.Create(ctx, nodeDrain("a-node", "another-node")),
		"metadata.name must equal spec.nodeName")

	changed := nd.DeepCopy()
	changed.Spec.NodeName = "other-node"
	wantRejected(t, "nodeName changed", cl.Update(ctx, changed), "spec.nodeName is immutable")

	bad := nodeDrain("bad-mode", "bad-mode")
	bad.Spec.Mode = "Reboot"
	wantRejected(t, "unknown mode", cl.Create(ctx, bad), `Unsupported value: "Reboot": supported values: "Maintenance", "Decommission"`)

	dup := nodeDrain("dup-req", "dup-req")
	dup.Spec.Requesters = append(dup.Spec.Requesters, v1alpha1.Requester{Name: "cli:test"})
	wantRejected(t, "duplicate requester", cl.Create(ctx, dup), "Duplicate value")

	empty := nodeDrain("", "")
	empty.Name = "x"
	wantRejected(t, "empty nodeName", cl.Create(ctx, empty), "spec.nodeName")
}

func TestDrainPolicyValidation(t *testing.T) {
	cl, _ := apiClient(t)
	ctx := testenv.Context(t)
	policy := func(name string, mutate func(*v1alpha1.DrainPolicySpec)) *v1alpha1.DrainPolicy {
		p := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}}
		mutate(&p.Spec)
		return p
	}

	good := policy("good", func(s *v1alpha1.DrainPolicySpec) {
		s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromString("20%"))
		s.Timeouts.Drain = &metav1.Duration{Duration: 90 * 60 * 1e9}
		s.Endpoints = v1alpha1.Endpoints{SettleTime: &metav1.Duration{}, Timeout: &metav1.Duration{Duration: 30e9}}
	})
	if err := cl.Create(ctx, good); err != nil {
		t.Fatalf("valid DrainPolicy rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, good) })
	if good.Spec.Pods.DaemonSets != "Ignore" || good.Spec.Pods.Unmanaged != "Block" || good.Spec.Timeouts.OnTimeout != "Fail" ||
		good.Spec.Concurrency.MaxParallelEvictionsPerNode != 10 {
		t.Errorf("defaults not applied: pods %+v, onTimeout %q, maxParallelEvictionsPerNode %d",
			good.Spec.Pods, good.Spec.Timeouts.OnTimeout, good.Spec.Concurrency.MaxParallelEvictionsPerNode)
	}
	three := policy("three", func(s *v1alpha1.DrainPolicySpec) {
		s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromInt32(3))
		s.Concurrency.BatchWindow = &metav1.Duration{Duration: 5e9}
		s.Schedule = &v1alpha1.Schedule{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{
			{Days: []v1alpha1.Weekday{"Sat", "Sun"}, Start: "00:00", End: "24:00"},
			{Start: "22:00", End: "04:30"},
		}}
	})
	if err := cl.Create(ctx, three); err != nil {
		t.Fatalf("maxParallelNodes 3 rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, three) })

	defaultWithSelector := policy(v1alpha1.DefaultPolicyName, func(s *v1alpha1.DrainPolicySpec) {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}
	})
	wantRejected(t, "default with a nodeSelector", cl.Create(ctx, defaultWithSelector),
		"the DrainPolicy named default governs the nodes no other policy selects: it takes no nodeSelector")

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.DrainPolicySpec)
		msg    string
	}{
		{"percent over 100", func(s *v1alpha1.DrainPolicySpec) { s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromString("150%")) },
			"must be a positive number or a percentage from 1% to 100%"},
		{"zero nodes", func(s *v1alpha1.DrainPolicySpec) { s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromInt32(0)) },
			"must be a positive number or a percentage from 1% to 100%"},
		{"percent without sign", func(s *v1alpha1.DrainPolicySpec) { s.Concurrency.MaxParallelNodes = ptr.To(intstr.FromString("ten")) },
			"must be a positive number or a percentage from 1% to 100%"},
		{"bad onTimeout", func(s *v1alpha1.DrainPolicySpec) { s.Timeouts.OnTimeout = "Delete" },
			`Unsupported value: "Delete"`},
		{"bad daemonSets", func(s *v1alpha1.DrainPolicySpec) { s.Pods.DaemonSets = "Drop" },
			`Unsupported value: "Drop"`},
		{"zero grace period", func(s *v1alpha1.DrainPolicySpec) { s.Pods.GracePeriodOverride = ptr.To[int64](0) },
			"should be greater than or equal to 1"},
		{"window hour 25", func(s *v1alpha1.DrainPolicySpec) { s.Schedule = window(nil, "25:00", "04:00") },
			`spec.schedule.windows[0].start: Invalid value: "25:00"`},
		{"window end without minutes", func(s *v1alpha1.DrainPolicySpec) { s.Schedule = window(nil, "22:00", "4") },
			`spec.schedule.windows[0].end: Invalid value: "4"`},
		{"empty window", func(s *v1alpha1.DrainPolicySpec) { s.Schedule = window(nil, "10:00", "10:00") },
			"start and end are the same time: the window would be empty"},
		{"unknown day", func(s *v1alpha1.DrainPolicySpec) { s.Schedule = window([]v1alpha1.Weekday{"Monday"}, "10:00", "12:00") },
			`Unsupported value: "Monday"`},
		{"no windows", func(s *v1alpha1.DrainPolicySpec) { s.Schedule = &v1alpha1.Schedule{TimeZone: "UTC"} },
			"spec.schedule.windows"},
		{"settle time over 10m", func(s *v1alpha1.DrainPolicySpec) { s.Endpoints.SettleTime = &metav1.Duration{Duration: 11 * 60e9} },
			"spec.endpoints.settleTime: Invalid value: \"11m0s\": must be a duration from 0s to 10m, such as 2s"},
		{"endpoints timeout 0", func(s *v1alpha1.DrainPolicySpec) { s.Endpoints.Timeout = &metav1.Duration{} },
			"spec.endpoints.timeout: Invalid value: \"0s\": must be a duration over 0s and at most 1h, such as 60s"},
	} {
		wantRejected(t, tc.name, cl.Create(ctx, policy("bad", tc.mutate)), tc.msg)
	}
}

func window(days []v1alpha1.Weekday, start, end string) *v1alpha1.Schedule {
	return &v1alpha1.Schedule{Windows: []v1alpha1.MaintenanceWindow{{Days: days, Start: start, End: end}}}
}

// TestDrainPolicyRejectsMalformedDuration sends raw JSON, since a typed
// client can only send well-formed durations.
func TestDrainPolicyRejectsMalformedDuration(t *testing.T) {
	_, c := apiClient(t)
	for _, d := range []string{"5 minutes", "10", "1d"} {
		manifest := `{"apiVersion":"vacate.dev/v1alpha1","kind":"DrainPolicy","metadata":{"name":"bad-duration"},"spec":{"timeouts":{"drain":"` + d + `"}}}`
		cmd := exec.Command(c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "create", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		wantRejected(t, "drain timeout "+d, kubectlErr(err, out), "must be a duration such as 90s, 15m or 1h30m")
	}
	// Well-formed but past what a Go duration holds (about 2562047h): were
	// it stored, no client could decode the policy (the controller's cache
	// included). The API server refuses it in every duration field.
	for _, field := range []string{`"timeouts":{"drain":"9999999h"}`, `"timeouts":{"cancel":"2562048h"}`,
		`"timeouts":{"nodeDeletion":"99999999999999999999s"}`, `"concurrency":{"batchWindow":"9999999h"}`} {
		manifest := `{"apiVersion":"vacate.dev/v1alpha1","kind":"DrainPolicy","metadata":{"name":"huge-duration"},"spec":{` + field + `}}`
		cmd := exec.Command(c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "create", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		if err == nil {
			_ = exec.Command(c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "delete", "drainpolicy", "huge-duration").Run()
		}
		wantRejected(t, "duration out of range "+field, kubectlErr(err, out), "must be a duration such as")
	}
}

func TestPrinterColumns(t *testing.T) {
	cl, c := apiClient(t)
	ctx := testenv.Context(t)
	nd := nodeDrain("columns-node", "columns-node")
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, nd) })
	out, err := exec.Command(c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "get", "nodedrains").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get nodedrains: %v\n%s", err, out)
	}
	t.Logf("kubectl get nodedrains:\n%s", out)
	header := strings.Fields(strings.SplitN(string(out), "\n", 2)[0])
	// The name is the node's; the mode and the first requester say what
	// kind of drain it is and who asked (-o wide lists every requester).
	want := []string{"NAME", "PHASE", "MODE", "REQUESTER", "EVICTED/TOTAL", "BLOCKED", "AGE"}
	if strings.Join(header, " ") != strings.Join(want, " ") {
		t.Errorf("columns = %v, want %v", header, want)
	}
}

type kubectlError struct{ out string }

func (e kubectlError) Error() string { return e.out }

func kubectlErr(err error, out []byte) error {
	if err == nil {
		return nil
	}
	return kubectlError{strings.TrimSpace(string(out))}
}

func evacuation(name string) *v1alpha1.Evacuation {
	return &v1alpha1.Evacuation{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.EvacuationSpec{NodeName: "node-1", Provider: "store", Mode: v1alpha1.ModeMaintenance,
			Desired: v1alpha1.DesiredEvacuate, DrainUID: "0b5e6a53-7a57-4a5e-9a57-2f1c1d0e4b2a"},
	}
}

func TestEvacuationValidation(t *testing.T) {
	cl, _ := apiClient(t)
	ctx := testenv.Context(t)

	ev := evacuation("node-1.store")
	if err := cl.Create(ctx, ev); err != nil {
		t.Fatalf("valid Evacuation rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, ev) })

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EvacuationSpec)
	}{
		{"nodeName changed", func(s *v1alpha1.EvacuationSpec) { s.NodeName = "node-2" }},
		{"provider changed", func(s *v1alpha1.EvacuationSpec) { s.Provider = "other-store" }},
	} {
		changed := ev.DeepCopy()
		tc.mutate(&changed.Spec)
		wantRejected(t, tc.name, cl.Update(ctx, changed), "nodeName and provider are immutable")
	}
	cancel := ev.DeepCopy()
	cancel.Spec.Desired = v1alpha1.DesiredCancel
	if err := cl.Update(ctx, cancel); err != nil {
		t.Fatalf("desired Cancel rejected: %v", err)
	}
	if cancel.Generation != ev.Generation+1 {
		t.Errorf("a spec change moved the generation from %d to %d, want +1 (providers answer per generation)", ev.Generation, cancel.Generation)
	}

	st := cancel.DeepCopy()
	st.Status = v1alpha1.EvacuationStatus{Phase: v1alpha1.EvacuationCancelled, ObservedGeneration: cancel.Generation,
		HeartbeatTime: &metav1.Time{Time: time.Now()}, Message: "extra replicas removed"}
	if err := cl.Status().Update(ctx, st); err != nil {
		t.Fatalf("valid status rejected: %v", err)
	}
	if st.Generation != cancel.Generation {
		t.Errorf("a status write moved the generation from %d to %d", cancel.Generation, st.Generation)
	}
	bad := st.DeepCopy()
	bad.Status.Phase = "Done"
	wantRejected(t, "unknown phase", cl.Status().Update(ctx, bad), `Unsupported value: "Done"`)
	long := st.DeepCopy()
	long.Status.Message = strings.Repeat("m", 2049)
	wantRejected(t, "message over 2048", cl.Status().Update(ctx, long), "Too long")

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EvacuationSpec)
		msg    string
	}{
		{"unknown desired", func(s *v1alpha1.EvacuationSpec) { s.Desired = "Pause" }, `Unsupported value: "Pause"`},
		{"no desired", func(s *v1alpha1.EvacuationSpec) { s.Desired = "" }, "spec.desired"},
		{"unknown mode", func(s *v1alpha1.EvacuationSpec) { s.Mode = "Reboot" }, `Unsupported value: "Reboot"`},
		{"empty nodeName", func(s *v1alpha1.EvacuationSpec) { s.NodeName = "" }, "spec.nodeName"},
		{"empty provider", func(s *v1alpha1.EvacuationSpec) { s.Provider = "" }, "spec.provider"},
	} {
		e := evacuation("bad-evacuation")
		tc.mutate(&e.Spec)
		wantRejected(t, tc.name, cl.Create(ctx, e), tc.msg)
	}
}

func TestEvacuationProviderValidation(t *testing.T) {
	cl, c := apiClient(t)
	ctx := testenv.Context(t)
	provider := func(name string, mutate func(*v1alpha1.EvacuationProviderSpec)) *v1alpha1.EvacuationProvider {
		p := &v1alpha1.EvacuationProvider{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.EvacuationProviderSpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "store"}}}}
		mutate(&p.Spec)
		return p
	}
	good := provider("good-store", func(s *v1alpha1.EvacuationProviderSpec) {
		s.Timeout = &metav1.Duration{Duration: 90 * time.Second}
		s.Modes = []v1alpha1.DrainMode{v1alpha1.ModeDecommission}
		s.Reporter = &v1alpha1.ProviderReporter{ServiceAccount: &v1alpha1.ServiceAccountReference{Namespace: "storage", Name: "store"}}
	})
	if err := cl.Create(ctx, good); err != nil {
		t.Fatalf("valid EvacuationProvider rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, good) })
	if good.Spec.Stage != v1alpha1.StageBeforeEviction {
		t.Errorf("stage defaulted to %q, want %q", good.Spec.Stage, v1alpha1.StageBeforeEviction)
	}

	for _, tc := range []struct {
		name   string
		mutate func(*v1alpha1.EvacuationProviderSpec)
		msg    string
	}{
		{"unknown stage", func(s *v1alpha1.EvacuationProviderSpec) { s.Stage = "DuringEviction" }, `Unsupported value: "DuringEviction"`},
		{"unknown mode", func(s *v1alpha1.EvacuationProviderSpec) { s.Modes = []v1alpha1.DrainMode{"Reboot"} }, `Unsupported value: "Reboot"`},
		{"duplicate mode", func(s *v1alpha1.EvacuationProviderSpec) {
			s.Modes = []v1alpha1.DrainMode{v1alpha1.ModeMaintenance, v1alpha1.ModeMaintenance}
		}, "Duplicate value"},
		// An empty podSelector with no namespaceSelector would hold every
		// pod of every node being drained.
		{"selects everything", func(s *v1alpha1.EvacuationProviderSpec) { s.PodSelector = metav1.LabelSelector{} },
			"an EvacuationProvider must select its pods"},
		{"reporter naming nobody", func(s *v1alpha1.EvacuationProviderSpec) { s.Reporter = &v1alpha1.ProviderReporter{} },
			"set exactly one of serviceAccount and user"},
		{"reporter naming two", func(s *v1alpha1.EvacuationProviderSpec) {
			s.Reporter = &v1alpha1.ProviderReporter{User: "store", ServiceAccount: &v1alpha1.ServiceAccountReference{Namespace: "storage", Name: "store"}}
		}, "set exactly one of serviceAccount and user"},
	} {
		wantRejected(t, tc.name, cl.Create(ctx, provider("bad-store", tc.mutate)), tc.msg)
	}
	// A whole namespace is a choice: an empty podSelector with a
	// namespaceSelector is accepted.
	ns := provider("ns-store", func(s *v1alpha1.EvacuationProviderSpec) {
		s.PodSelector = metav1.LabelSelector{}
		s.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"storage": "yes"}}
	})
	if err := cl.Create(ctx, ns); err != nil {
		t.Errorf("a provider of every pod in selected namespaces rejected: %v", err)
	} else {
		t.Cleanup(func() { _ = cl.Delete(ctx, ns) })
	}

	// A typed client can only send well-formed durations: send raw JSON.
	for _, d := range []string{"5 minutes", "10", "1d", "-30s"} {
		manifest := `{"apiVersion":"vacate.dev/v1alpha1","kind":"EvacuationProvider","metadata":{"name":"bad-timeout"},` +
			`"spec":{"podSelector":{"matchLabels":{"app":"store"}},"timeout":"` + d + `"}}`
		cmd := exec.Command(c.Binaries[devcluster.Kubectl], "--kubeconfig", c.Kubeconfig, "create", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		out, err := cmd.CombinedOutput()
		wantRejected(t, "timeout "+d, kubectlErr(err, out), "must be a positive duration such as 30s or 2m")
	}
}

// TestSafetyRecordsValidation: the records safety decisions rest on cannot
// be undone by an edit. An Evacuation's protectedPods only grow and its
// release stays while it belongs to the same drain and node (a takeover by
// another drain, or the same drain on a recreated node, starts afresh); a
// NodeDrain's mode never goes down.
func TestSafetyRecordsValidation(t *testing.T) {
	cl, _ := apiClient(t)
	ctx := testenv.Context(t)
	pod := func(name string) v1alpha1.ProtectedPod {
		return v1alpha1.ProtectedPod{Namespace: "shop", Name: name, UID: "uid-" + name}
	}
	ev := evacuation("records.store")
	ev.Spec.NodeUID = "node-uid-1"
	ev.Spec.ProtectedPods = []v1alpha1.ProtectedPod{pod("a"), pod("b")}
	if err := cl.Create(ctx, ev); err != nil {
		t.Fatalf("valid Evacuation rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, ev) })
	update := func(what string, mutate func(*v1alpha1.EvacuationSpec)) error {
		t.Helper()
		cur := &v1alpha1.Evacuation{}
		if err := cl.Get(ctx, client.ObjectKeyFromObject(ev), cur); err != nil {
			t.Fatal(err)
		}
		mutate(&cur.Spec)
		return cl.Update(ctx, cur)
	}
	wantRejected(t, "dropping a protected pod", update("drop", func(s *v1alpha1.EvacuationSpec) { s.ProtectedPods = s.ProtectedPods[:1] }),
		"spec.protectedPods only grows")
	wantRejected(t, "emptying protectedPods", update("empty", func(s *v1alpha1.EvacuationSpec) { s.ProtectedPods = nil }),
		"spec.protectedPods only grows")
	if err := update("add", func(s *v1alpha1.EvacuationSpec) { s.ProtectedPods = append(s.ProtectedPods, pod("c")) }); err != nil {
		t.Errorf("adding a protected pod rejected: %v", err)
	}
	release := &v1alpha1.EvacuationRelease{By: "rita", Reason: "provider gone", Time: metav1.NewTime(time.Unix(1_800_000_000, 0))}
	if err := update("release", func(s *v1alpha1.EvacuationSpec) { s.Release = release }); err != nil {
		t.Errorf("setting spec.release rejected: %v", err)
	}
	wantRejected(t, "withdrawing the release", update("unrelease", func(s *v1alpha1.EvacuationSpec) { s.Release = nil }),
		"spec.release cannot be withdrawn")
	wantRejected(t, "changing the release", update("rerelease", func(s *v1alpha1.EvacuationSpec) { s.Release.By = "mallory" }),
		"spec.release cannot be withdrawn")
	if err := update("new node", func(s *v1alpha1.EvacuationSpec) {
		s.NodeUID, s.ProtectedPods, s.Release = "node-uid-2", []v1alpha1.ProtectedPod{pod("z")}, nil
	}); err != nil {
		t.Errorf("the same drain on a recreated node could not start afresh: %v", err)
	}
	if err := update("takeover", func(s *v1alpha1.EvacuationSpec) { s.DrainUID, s.ProtectedPods = "another-drain", nil }); err != nil {
		t.Errorf("another drain could not take the Evacuation over: %v", err)
	}
	tooMany := evacuation("toomany.store")
	for i := range 257 {
		tooMany.Spec.ProtectedPods = append(tooMany.Spec.ProtectedPods, pod(strings.Repeat("p", 1+i%5)+string(rune('a'+i%26))))
	}
	wantRejected(t, "257 protected pods", cl.Create(ctx, tooMany), "spec.protectedPods: Too many")

	nd := nodeDrain("records-node", "records-node")
	nd.Spec.Mode = v1alpha1.ModeDecommission
	if err := cl.Create(ctx, nd); err != nil {
		t.Fatalf("valid NodeDrain rejected: %v", err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, nd) })
	nd.Spec.Mode = v1alpha1.ModeMaintenance
	wantRejected(t, "lowering the mode", cl.Update(ctx, nd), "spec.mode never goes down")
	up := nodeDrain("records-up", "records-up")
	if err := cl.Create(ctx, up); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(ctx, up) })
	up.Spec.Mode = v1alpha1.ModeDecommission
	if err := cl.Update(ctx, up); err != nil {
		t.Errorf("raising the mode to Decommission rejected: %v", err)
	}
}
