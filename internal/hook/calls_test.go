package hook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// calls records what the prober tells Observe.
type calls struct {
	mu  sync.Mutex
	got []Call
}

func (c *calls) observe(call Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, call)
}

// list is the calls so far as "METHOD Result".
func (c *calls) list() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, call := range c.got {
		out = append(out, call.Method+" "+call.Result)
	}
	return out
}

// TestEveryCallIsObserved: each call of a conversation is reported once,
// with its method and its result (the state answered, or what went
// wrong), in order: the answers a GET gets one after the other, the new
// POST after a 404, the DELETE of a cancel. Every result is one of
// Results, so the controller's metrics have a series for it from the start.
func TestEveryCallIsObserved(t *testing.T) {
	a := &app{script: []func(http.ResponseWriter){
		reply(200, `{"state":"InProgress","remaining":2}`),
		reply(503, "busy"),
		reply(200, "<html>"),
		func(w http.ResponseWriter) {
			time.Sleep(400 * time.Millisecond) // past the client's 200ms
			w.WriteHeader(http.StatusOK)
		},
		reply(404, "no such drain"),
		reply(200, `{"state":"Failed","message":"disk"}`),
		reply(200, `{"state":"Completed"}`),
	}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	var seen calls
	p := fastProber(nil)
	p.Observe = seen.observe
	tg := target(t, srv)
	eventually(t, p, tg, "completed", Result.Done)
	for {
		if _, ok := p.Cancel(tg); ok {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	want := []string{"POST Answered", "GET InProgress", "GET HTTPError", "GET BadAnswer", "GET Timeout", "GET NotFound",
		"POST Answered", "GET Failed", "GET Completed", "DELETE Answered"}
	if got := seen.list(); !slices.Equal(got, want) {
		t.Errorf("calls observed:\n%v\nwant\n%v", got, want)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	for _, c := range seen.got {
		if !slices.Contains(Results, c.Result) {
			t.Errorf("result %q is not one of Results %v", c.Result, Results)
		}
		if c.Duration <= 0 {
			t.Errorf("%s %s: duration %s, want the call's", c.Method, c.Result, c.Duration)
		}
	}
}

type noTokens struct{}

func (noTokens) Token(context.Context, types.UID) (string, error) {
	return "", errors.New("TokenRequest: forbidden")
}

// TestCallsNotAnsweredAreObserved: a hook nobody listens for is
// Unreachable; a call whose token cannot be had is NoToken, with no
// duration (it was not made).
func TestCallsNotAnsweredAreObserved(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close() // nothing listens there now
	for _, tc := range []struct {
		name   string
		tokens Tokens
		want   string
	}{
		{"nobody listens", nil, "POST Unreachable"},
		{"no token", noTokens{}, "POST NoToken"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen calls
			p := fastProber(nil)
			p.Observe, p.Tokens = seen.observe, tc.tokens
			tg := Target{Pod: "uid-1", Name: "ns/broker-0", IP: "127.0.0.1", Port: port, Path: "/evacuate", Run: Run{Drain: "d", Node: "node-1"}}
			eventually(t, p, tg, "reported the problem", func(r Result) bool { return r.Problem != "" })
			p.Forget(tg.Pod)
			got := seen.list()
			if len(got) == 0 || got[0] != tc.want {
				t.Fatalf("calls observed %v, want %s first", got, tc.want)
			}
			seen.mu.Lock()
			defer seen.mu.Unlock()
			if d := seen.got[0].Duration; (tc.tokens != nil) != (d == 0) {
				t.Errorf("duration %s: want 0 exactly for a call not made", d)
			}
		})
	}
}
