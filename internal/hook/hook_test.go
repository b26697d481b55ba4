package hook

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// app is a scripted hook: each GET answers with the next scripted reply.
type app struct {
	mu      sync.Mutex
	posts   int
	deletes int
	gets    int
	script  []func(w http.ResponseWriter)
	queries []string
}

// ServeHTTP records the call and answers it. A GET's scripted step runs
// outside the lock, so a slow step (a hook that answers too late) does not
// hold up the calls after it: those would time out in the queue and take
// the next steps' answers with them.
func (a *app) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.queries = append(a.queries, r.Method+" "+r.URL.RequestURI())
	var step func(http.ResponseWriter)
	switch r.Method {
	case http.MethodPost:
		a.posts++
		step = func(w http.ResponseWriter) { w.WriteHeader(http.StatusAccepted) }
	case http.MethodDelete:
		a.deletes++
		step = func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }
	case http.MethodGet:
		step = a.script[min(a.gets, len(a.script)-1)]
		a.gets++
	}
	a.mu.Unlock()
	if step != nil {
		step(w)
	}
}

func reply(code int, body string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

func target(t *testing.T, srv *httptest.Server) Target {
	t.Helper()
	host, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	return Target{Pod: "uid-1", Name: "ns/broker-0", IP: host, Port: p, Path: "/evacuate", Run: Run{Drain: "drain-uid", Node: "node-1", Mode: "Maintenance"}}
}

func fastProber(changed func(string)) *Prober {
	p := NewProber(changed)
	p.Poll, p.Backoff, p.MaxBackoff = 10*time.Millisecond, 10*time.Millisecond, 40*time.Millisecond
	p.Client.Timeout = 200 * time.Millisecond
	return p
}

// eventually polls the prober's result until cond holds.
func eventually(t *testing.T, p *Prober, tg Target, what string, cond func(Result) bool) Result {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := p.Evacuate(tg)
		if cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("hook never %s; last result %+v (%s)", what, r, r.Describe())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFaultsAreNeverDone: 500, garbage, an unknown state, an oversized
// body, a redirect and "Completed" with work remaining are each reported
// and not taken as done; the hook completes once it answers well.
func TestFaultsAreNeverDone(t *testing.T) {
	big := `{"state":"InProgress","message":"` + strings.Repeat("x", MaxBody) + `"}`
	for _, tc := range []struct {
		name    string
		fault   func(http.ResponseWriter)
		problem string
	}{
		{"server error", reply(500, "disk full"), `HTTP 500: "disk full"`},
		{"garbage", reply(200, "<html>oops</html>"), "malformed answer"},
		{"unknown state", reply(200, `{"state":"Done"}`), `unknown state "Done"`},
		{"oversized", reply(200, big), "answer larger than"},
		{"redirect", func(w http.ResponseWriter) {
			w.Header().Set("Location", "http://example.com/")
			w.WriteHeader(http.StatusFound)
		}, "HTTP 302"},
		{"completed with work left", reply(200, `{"state":"Completed","remaining":3}`), "says Completed with 3 remaining"},
		{"empty body", reply(200, ""), "empty body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &app{script: []func(http.ResponseWriter){
				reply(200, `{"state":"InProgress","message":"forwarding","remaining":7}`),
				tc.fault, tc.fault, tc.fault,
				reply(200, `{"state":"Completed","message":"all forwarded","remaining":0}`),
			}}
			srv := httptest.NewServer(a)
			defer srv.Close()
			var changes sync.WaitGroup
			changes.Add(1)
			var once sync.Once
			p := fastProber(func(node string) {
				if node == "node-1" {
					once.Do(changes.Done)
				}
			})
			tg := target(t, srv)
			r := eventually(t, p, tg, "reported the fault", func(r Result) bool { return strings.Contains(r.Problem, tc.problem) })
			if r.Done() {
				t.Fatalf("a fault counted as done: %+v", r)
			}
			if !strings.Contains(r.Describe(), "not counted as done") {
				t.Errorf("Describe() = %q does not say the fault is not done", r.Describe())
			}
			eventually(t, p, tg, "completed after the fault cleared", Result.Done)
			changes.Wait() // Changed was called
			a.mu.Lock()
			defer a.mu.Unlock()
			if a.posts != 1 {
				t.Errorf("%d POSTs, want 1", a.posts)
			}
			if !strings.HasPrefix(a.queries[0], "POST /evacuate?drain=drain-uid") || !strings.HasPrefix(a.queries[1], "GET /evacuate?drain=drain-uid") {
				t.Errorf("calls %v: want POST then GET with ?drain=<uid>", a.queries[:2])
			}
		})
	}
}

// TestTimeoutAndRestartedApp: a hook that does not answer in time is a
// problem, not progress; a GET answered 404 (the app lost the drain)
// starts the evacuation again with a new POST.
func TestTimeoutAndRestartedApp(t *testing.T) {
	slow := true // the first GET answers too late
	var mu sync.Mutex
	a := &app{script: []func(http.ResponseWriter){
		func(w http.ResponseWriter) {
			mu.Lock()
			s := slow
			mu.Unlock()
			if s {
				time.Sleep(400 * time.Millisecond)
			}
			w.WriteHeader(http.StatusNotFound)
		},
		reply(404, "no such drain"),
		reply(200, `{"state":"Completed"}`),
	}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	p := fastProber(nil)
	tg := target(t, srv)
	eventually(t, p, tg, "reported the timeout", func(r Result) bool { return strings.Contains(r.Problem, "timed out after 200ms") })
	mu.Lock()
	slow = false
	mu.Unlock()
	eventually(t, p, tg, "completed", Result.Done)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.posts < 2 {
		t.Errorf("%d POSTs: a 404 on GET must start the evacuation again", a.posts)
	}
}

// TestCancelSendsDelete: Cancel replaces the evacuation's conversation with
// a DELETE, acknowledged by 2xx or 404.
func TestCancelSendsDelete(t *testing.T) {
	a := &app{script: []func(http.ResponseWriter){reply(200, `{"state":"InProgress","remaining":5}`)}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	p := fastProber(nil)
	tg := target(t, srv)
	eventually(t, p, tg, "in progress", func(r Result) bool { return r.State == InProgress })
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := p.Cancel(tg); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("cancel never acknowledged")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.deletes != 1 || !strings.HasPrefix(a.queries[len(a.queries)-1], "DELETE /evacuate?drain=drain-uid") {
		t.Errorf("calls %v: want one DELETE with the drain", a.queries)
	}
}

func TestTargetForChecksAnnotations(t *testing.T) {
	pod := func(port, path, ip string) *corev1.Pod {
		ann := map[string]string{AnnotationPort: port}
		if path != "" {
			ann[AnnotationPath] = path
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Annotations: ann}, Status: corev1.PodStatus{PodIP: ip}}
	}
	good, err := TargetFor(pod("8080", "/drain/hook", "127.64.0.5"), Run{Drain: "u", Node: "n", Mode: "Maintenance"}, true)
	if err != nil || good.URL() != "http://127.64.0.5:8080/drain/hook" {
		t.Errorf("TargetFor = %q, %v", good.URL(), err)
	}
	if d, _ := TargetFor(pod("8080", "", "127.64.0.5"), Run{Drain: "u", Node: "n", Mode: "Maintenance"}, true); d.URL() != "http://127.64.0.5:8080"+DefaultPath {
		t.Errorf("default path: %q", d.URL())
	}
	for _, tc := range []struct{ port, path, ip, want string }{
		{"http", "", "127.0.0.1", "is not a port number"},
		{"70000", "", "127.0.0.1", "is not a port number"},
		{"80", "http://evil.example/x", "127.0.0.1", "is not an absolute path"},
		{"80", "//evil.example/x", "127.0.0.1", "is not an absolute path"},
		{"80", "/x?y=1", "127.0.0.1", "is not an absolute path"},
		{"80", "/../admin", "127.0.0.1", "is not an absolute path"},
		{"80", "/x", "", "has no IP yet"},
	} {
		if _, err := TargetFor(pod(tc.port, tc.path, tc.ip), Run{Drain: "u", Node: "n", Mode: "Maintenance"}, true); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("TargetFor(port %q, path %q, ip %q) = %v, want %q", tc.port, tc.path, tc.ip, err, tc.want)
		}
	}
}
