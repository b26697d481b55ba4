package hook

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func hookedPod(ip string, podIPs ...string) *corev1.Pod {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "uid-1",
		Annotations: map[string]string{AnnotationPort: "8080"}}, Status: corev1.PodStatus{PodIP: ip}}
	if len(podIPs) == 0 && ip != "" {
		podIPs = []string{ip}
	}
	for _, a := range podIPs {
		pod.Status.PodIPs = append(pod.Status.PodIPs, corev1.PodIP{IP: a})
	}
	return pod
}

// TestTargetForRefusesAddresses: the hook is never called on a hostNetwork
// pod (its IP is the node's), nor on a link-local, metadata, unspecified,
// multicast or broadcast address, nor on loopback unless allowed, nor on
// an IP that is not among the pod's current status.podIPs.
func TestTargetForRefusesAddresses(t *testing.T) {
	run := Run{Drain: "u", ID: "r", Node: "n", Mode: "Maintenance"}
	host := hookedPod("10.0.0.7")
	host.Spec.HostNetwork = true
	notListed := hookedPod("10.0.0.8", "10.0.0.9")
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want string
	}{
		{"hostNetwork", host, "hostNetwork"},
		{"metadata", hookedPod("169.254.169.254"), "link-local"},
		{"link-local", hookedPod("169.254.3.4"), "link-local"},
		{"link-local v6", hookedPod("fe80::1"), "link-local"},
		{"aws metadata v6", hookedPod("fd00:ec2::254"), "metadata"},
		{"mapped metadata", hookedPod("::ffff:169.254.169.254"), "link-local"},
		{"unspecified", hookedPod("0.0.0.0"), "unspecified"},
		{"unspecified v6", hookedPod("::"), "unspecified"},
		{"multicast", hookedPod("224.0.0.1"), "multicast"},
		{"multicast v6", hookedPod("ff02::1"), "multicast"},
		{"broadcast", hookedPod("255.255.255.255"), "broadcast"},
		{"loopback", hookedPod("127.0.0.1"), "loopback"},
		{"loopback v6", hookedPod("::1"), "loopback"},
		{"not in podIPs", notListed, "not among the pod's status.podIPs"},
	} {
		_, err := TargetFor(tc.pod, run, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: TargetFor = %v, want an error saying %q", tc.name, err, tc.want)
			continue
		}
		if !IsRefused(err) {
			t.Errorf("%s: %v is not a refused address (IsRefused)", tc.name, err)
		}
	}
	for _, ip := range []string{"10.1.2.3", "fd12:3456::7", "192.168.0.4"} {
		if _, err := TargetFor(hookedPod(ip), run, false); err != nil {
			t.Errorf("TargetFor(%s) = %v, want a target", ip, err)
		}
	}
	if _, err := TargetFor(hookedPod("127.64.0.5"), run, true); err != nil {
		t.Errorf("loopback with --allow-loopback-hooks: %v", err)
	}
	if _, err := TargetFor(hookedPod("169.254.169.254"), run, true); err == nil {
		t.Error("--allow-loopback-hooks let a link-local address through")
	}
}

// TestHostileAnswersAreSummarised: what an app says (its message, an error
// body) reaches status only as a short printable summary.
func TestHostileAnswersAreSummarised(t *testing.T) {
	hostile := "\x1b[31mred\x1b[0m\r\nSet-Cookie: x\u202e\u0000" + strings.Repeat("é", 5000)
	quoted, _ := json.Marshal(hostile)
	for _, tc := range []struct {
		name  string
		reply func(http.ResponseWriter)
	}{
		{"message", reply(200, `{"state":"InProgress","message":`+string(quoted)+`}`)},
		{"error body", reply(500, hostile)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(&app{script: []func(http.ResponseWriter){tc.reply}})
			defer srv.Close()
			p := fastProber(nil)
			tg := target(t, srv)
			r := eventually(t, p, tg, "answered", func(r Result) bool { return r.State != "" || r.Problem != "" })
			for _, s := range []string{r.Message, r.Problem, r.Describe()} {
				if !utf8.ValidString(s) {
					t.Errorf("not valid UTF-8: %q", s)
				}
				for _, c := range s {
					if !unicode.IsPrint(c) {
						t.Errorf("non-printable %U in %q", c, s)
						break
					}
				}
				if n := utf8.RuneCountInString(s); n > 2*MaxSummary+200 {
					t.Errorf("%d runes, want a short summary: %q", n, s)
				}
			}
			if n := utf8.RuneCountInString(r.Message); n > MaxSummary {
				t.Errorf("message of %d runes, want at most %d", n, MaxSummary)
			}
		})
	}
}

// TestAnswerOfAnotherRunIsNeverDone: an app that echoes the run (or the
// drain) is believed only about this run; the run goes with every call; a
// v1 app that names neither still completes.
func TestAnswerOfAnotherRunIsNeverDone(t *testing.T) {
	a := &app{script: []func(http.ResponseWriter){
		reply(200, `{"state":"Completed","run":"run-0"}`),
		reply(200, `{"state":"Completed","drain":"another-drain"}`),
		reply(200, `{"state":"Completed","drain":"drain-uid","run":"run-1"}`),
	}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	p := fastProber(nil)
	tg := target(t, srv)
	tg.ID = "run-1"
	eventually(t, p, tg, "refused the earlier run's Completed", func(r Result) bool {
		return strings.Contains(r.Problem, `the answer is about run "run-0" of the drain, not the current run run-1`) && !r.Done()
	})
	eventually(t, p, tg, "refused another drain's Completed", func(r Result) bool {
		return strings.Contains(r.Problem, `the answer is about drain "another-drain"`) && !r.Done()
	})
	eventually(t, p, tg, "completed for its own run", Result.Done)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !strings.HasPrefix(a.queries[0], "POST /evacuate?drain=drain-uid&run=run-1") || !strings.HasPrefix(a.queries[1], "GET /evacuate?drain=drain-uid&run=run-1") {
		t.Errorf("calls %v: want the run beside the drain", a.queries)
	}

	v1 := &app{script: []func(http.ResponseWriter){reply(200, `{"state":"Completed"}`)}}
	srv1 := httptest.NewServer(v1)
	defer srv1.Close()
	t1 := target(t, srv1)
	t1.ID = "run-1"
	eventually(t, p, t1, "completed (a v1 app)", Result.Done)
}

// TestCheckBeforeEveryCall: a target that is no longer its pod's (gone,
// another IP) is not called; the conversation ends and says why.
func TestCheckBeforeEveryCall(t *testing.T) {
	a := &app{script: []func(http.ResponseWriter){reply(200, `{"state":"InProgress"}`)}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	var mu sync.Mutex
	gone := false
	p := fastProber(nil)
	p.Check = func(Target) error {
		mu.Lock()
		defer mu.Unlock()
		if gone {
			return errors.New("pod ns/broker-0 is gone")
		}
		return nil
	}
	tg := target(t, srv)
	eventually(t, p, tg, "in progress", func(r Result) bool { return r.State == InProgress })
	mu.Lock()
	gone = true
	mu.Unlock()
	deadline := time.Now().Add(5 * time.Second)
	for p.Len() > 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Len() != 0 {
		t.Fatal("the conversation of a pod that is gone was not dropped")
	}
	a.mu.Lock()
	calls := len(a.queries)
	a.mu.Unlock()
	time.Sleep(100 * time.Millisecond) // several polls' worth: a wrong prober would call again
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queries) != calls {
		t.Errorf("called after the check failed: %v", a.queries[calls:])
	}
}
