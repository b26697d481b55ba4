package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/examples/broker"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
	"github.com/vacate-dev/vacate/internal/hook"
	"github.com/vacate-dev/vacate/internal/requests"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const (
	port     = 7070
	messages = 10000
)

// brokerProc is one broker process on its simulated pod's IP.
type brokerProc struct {
	name, url, dir string
	args           []string
	cmd            *exec.Cmd
}

func (b *brokerProc) start(t *testing.T, bin string) {
	t.Helper()
	b.cmd = exec.Command(bin, b.args...)
	b.cmd.Stdout, b.cmd.Stderr = os.Stderr, os.Stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := b.stats()
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("broker %s did not start serving", b.name)
	}
}

func (b *brokerProc) kill() {
	_ = b.cmd.Process.Signal(syscall.SIGKILL)
	_ = b.cmd.Wait()
}

type stats struct {
	Stored     int  `json:"stored"`
	Evacuating bool `json:"evacuating"`
}

func (b *brokerProc) stats() (stats, error) {
	var s stats
	resp, err := http.Get(b.url + "/stats")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

func (b *brokerProc) fault(t *testing.T, mode string) {
	t.Helper()
	resp, err := http.Post(b.url+"/fault?hook="+mode, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestBrokerEvacuationMovesEveryMessage is issue 6's broker scenario: three
// brokers hold 10,000 messages; the node of one is drained. On the way its
// hook fails (HTTP 500, a hang, garbage) and its process is killed
// mid-migration; each time its pod stays and the drain says why. In the
// end every message is consumable exactly once from the other two, and the
// pod was evicted only once the broker held no message.
func TestBrokerEvacuationMovesEveryMessage(t *testing.T) {
	c := testenv.Start(t)
	cl := testenv.Controller(t, c)
	ctx := testenv.Context(t)
	nodes := testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "brk", Count: 3, Labels: map[string]string{"pool": "brk"}})
	ns := testenv.Namespace(t, c)
	dp := &v1alpha1.DrainPolicy{ObjectMeta: metav1.ObjectMeta{Name: "brokers"}, Spec: v1alpha1.DrainPolicySpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "brk"}},
		Concurrency:  v1alpha1.Concurrency{MaxParallelNodes: ptr.To(intstr.FromInt32(1))},
		HTTPHooks:    v1alpha1.HTTPHooks{Enabled: true},
	}}
	if err := cl.Create(ctx, dp); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Delete(context.Background(), dp) })

	bin := filepath.Join(t.TempDir(), "broker")
	testutil.BuildProgram(t, "./cmd/broker", bin)
	pods := make([]corev1.Pod, len(nodes))
	for i, n := range nodes {
		d := devcluster.Deployment(ns, fmt.Sprintf("broker-%d", i), 1)
		d.Spec.Template.Spec.NodeSelector = map[string]string{devcluster.HostnameLabel: n}
		d.Spec.Template.Annotations = map[string]string{hook.AnnotationPort: fmt.Sprint(port)}
		if _, err := c.Client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ready, err := devcluster.WaitForPodsReady(ctx, c.Client, ns, labels.SelectorFromSet(labels.Set{devcluster.AppLabel: d.Name}), 1, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		pods[i] = ready[0]
	}
	brokers := make([]*brokerProc, len(nodes))
	for i := range nodes {
		b := &brokerProc{name: fmt.Sprintf("broker-%d", i), dir: t.TempDir(), url: fmt.Sprintf("http://%s:%d", pods[i].Status.PodIP, port)}
		var peers []string
		for j := range nodes {
			if j != i {
				peers = append(peers, fmt.Sprintf("http://%s:%d", pods[j].Status.PodIP, port))
			}
		}
		// The broker answers vacate-controller alone (pkg/hookauth), reading
		// the cluster's keys as its namespace's default service account.
		auth := testenv.HookAuth(t, c, ns, "default", t.TempDir())
		b.args = []string{"--name", b.name, "--listen", fmt.Sprintf("%s:%d", pods[i].Status.PodIP, port), "--data", b.dir,
			"--peers", strings.Join(peers, ","), "--no-fsync",
			"--pod-uid", string(pods[i].UID), "--api-server", auth["apiServer"].(string), "--ca-file", auth["caFile"].(string), "--token-file", auth["tokenFile"].(string)}
		if i == 0 {
			b.args = append(b.args, "--forward-delay", "1ms") // slow enough to be killed mid-way
		}
		b.start(t, bin)
		brokers[i] = b
		t.Cleanup(b.kill)
	}

	published := publish(t, brokers)
	t.Logf("published %d messages", len(published))
	t.Log("a caller without vacate-controller's token cannot start an evacuation")
	resp, err := http.Post(brokers[1].url+"/evacuate?drain=forged", "application/json", strings.NewReader(`{"drain":"forged","node":"x","mode":"Decommission"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s, _ := brokers[1].stats(); resp.StatusCode != http.StatusUnauthorized || s.Evacuating {
		t.Fatalf("an unauthenticated POST /evacuate: HTTP %d, broker-1 evacuating %v; want 401 and not evacuating", resp.StatusCode, s.Evacuating)
	}
	b0 := brokers[0]
	before, err := b0.stats()
	if err != nil || before.Stored == 0 {
		t.Fatalf("broker-0 holds no message (%+v, %v)", before, err)
	}

	// The guard: at the moment broker-0's pod is evicted, it must hold no message.
	evictedWith := make(chan string, 1)
	watchEviction(t, c, ns, pods[0].Name, func() {
		s, err := b0.stats()
		evictedWith <- fmt.Sprintf("%d stored (%v)", s.Stored, err)
	})

	target := nodes[0]
	if err := requests.Apply(ctx, cl, target, v1alpha1.Requester{Name: "cli:test"}, "", ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cl.Delete(context.Background(), &v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: target}})
	})
	for _, f := range []struct{ mode, shows string }{
		{"error", `HTTP 500: "injected fault`},
		{"hang", "timed out after 5s"},
		{"garbage", "malformed answer"},
	} {
		b0.fault(t, f.mode)
		waitHeld(t, cl, target, pods[0], f.shows)
		if s, _ := b0.stats(); s.Stored != before.Stored {
			t.Errorf("with the hook failing (%s), broker-0 holds %d messages, had %d: nothing should have moved", f.mode, s.Stored, before.Stored)
		}
	}
	b0.fault(t, "none")
	t.Log("the hook answers: broker-0 forwards; it is killed mid-way")
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		s, err := b0.stats()
		return err == nil && s.Stored < before.Stored*3/4 && s.Stored > 0, nil
	})
	if err != nil {
		t.Fatal("broker-0 never got mid-way through forwarding")
	}
	b0.kill()
	waitHeld(t, cl, target, pods[0], "connection refused")
	if _, err := c.Client.CoreV1().Pods(ns).Get(ctx, pods[0].Name, metav1.GetOptions{}); err != nil {
		t.Fatalf("broker-0's pod is gone while its broker is down mid-migration: %v", err)
	}
	t.Log("broker-0 restarts on its data and finishes")
	b0.start(t, bin)
	nd := &v1alpha1.NodeDrain{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cl.Get(ctx, types.NamespacedName{Name: target}, nd); err != nil {
			return false, nil
		}
		return nd.Status.Phase == v1alpha1.PhaseDrained, nil
	})
	if err != nil {
		t.Fatalf("the drain did not finish: phase %s, blockers %+v, hooks %+v", nd.Status.Phase, nd.Status.Blockers, nd.Status.Hooks)
	}
	select {
	case s := <-evictedWith:
		if !strings.HasPrefix(s, "0 stored") {
			t.Errorf("broker-0's pod was evicted while it held %s", s)
		}
	case <-time.After(10 * time.Second):
		t.Error("broker-0's pod eviction was not seen")
	}

	checkEveryMessageOnce(t, published, brokers[1:])
	if s, err := b0.stats(); err != nil || s.Stored != 0 {
		t.Errorf("broker-0 still holds %d messages (%v)", s.Stored, err)
	}
}

// checkEveryMessageOnce consumes every message from the brokers and fails
// the test for each message lost, duplicated or changed.
func checkEveryMessageOnce(t *testing.T, published map[string]string, from []*brokerProc) {
	t.Helper()
	got := map[string]int{}
	for _, b := range from {
		for _, m := range consumeAll(t, b) {
			got[m.ID]++
			if published[m.ID] != m.Body {
				t.Errorf("message %s has body %q, published %q", m.ID, m.Body, published[m.ID])
			}
		}
	}
	lost, dup := 0, 0
	for id := range published {
		switch got[id] {
		case 0:
			lost++
		case 1:
		default:
			dup++
		}
	}
	t.Logf("consumed %d distinct messages of %d published from %d broker(s); %d lost, %d duplicated", len(got), len(published), len(from), lost, dup)
	if lost > 0 || dup > 0 || len(got) != len(published) {
		t.Errorf("%d lost, %d duplicated, %d consumed of %d published", lost, dup, len(got), len(published))
	}
}

// publish sends messages round robin to the brokers, 16 at a time, and
// returns the bodies by id.
func publish(t *testing.T, brokers []*brokerProc) map[string]string {
	t.Helper()
	var mu sync.Mutex
	out := map[string]string{}
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				body := fmt.Sprintf("order %d", i)
				resp, err := http.Post(brokers[i%len(brokers)].url+"/publish", "text/plain", strings.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				var ans struct{ ID string }
				err = json.NewDecoder(resp.Body).Decode(&ans)
				resp.Body.Close()
				if err != nil || ans.ID == "" {
					errs <- fmt.Errorf("publish %d: %v", i, err)
					return
				}
				mu.Lock()
				out[ans.ID] = body
				mu.Unlock()
			}
		}()
	}
	for i := range messages {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

func consumeAll(t *testing.T, b *brokerProc) []broker.Message {
	t.Helper()
	var all []broker.Message
	for {
		resp, err := http.Get(b.url + "/consume?max=1000")
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var batch []broker.Message
		if err := json.Unmarshal(data, &batch); err != nil {
			t.Fatalf("consume from %s: %v: %s", b.name, err, bytes.TrimSpace(data))
		}
		if len(batch) == 0 {
			return all
		}
		all = append(all, batch...)
	}
}

// waitHeld waits until the drain holds the pod for its hook with detail.
func waitHeld(t *testing.T, cl client.Client, node string, pod corev1.Pod, detail string) {
	t.Helper()
	ctx := context.Background()
	nd := &v1alpha1.NodeDrain{}
	testutil.Eventually(t, time.Minute, fmt.Sprintf("the drain to hold broker-0's pod with %q", detail), func() error {
		if err := cl.Get(ctx, types.NamespacedName{Name: node}, nd); err == nil {
			for _, b := range nd.Status.Blockers {
				if b.Reason == v1alpha1.BlockerHTTPHook && b.Pod == pod.Namespace+"/"+pod.Name && strings.Contains(b.Detail, detail) {
					return nil
				}
			}
		}
		return fmt.Errorf("blockers %+v", nd.Status.Blockers)
	})
	t.Logf("held: %s", detail)
}

// watchEviction calls seen once, when the pod starts terminating.
func watchEviction(t *testing.T, c *devcluster.Cluster, ns, name string, seen func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for ev := range w.ResultChan() {
			if p, ok := ev.Object.(*corev1.Pod); ok && p.DeletionTimestamp != nil {
				seen()
				return
			}
		}
	}()
}
