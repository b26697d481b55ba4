package leader

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection/resourcelock"
	clocktesting "k8s.io/utils/clock/testing"
)

// fakeLock is a resource lock whose writes succeed or fail on demand.
type fakeLock struct {
	resourcelock.Interface
	fail error
}

func (l *fakeLock) Identity() string { return "me" }
func (l *fakeLock) Create(context.Context, resourcelock.LeaderElectionRecord) error {
	return l.fail
}
func (l *fakeLock) Update(context.Context, resourcelock.LeaderElectionRecord) error {
	return l.fail
}

func TestFenceOpensOnRenewalAndClosesAfterTheValidity(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	f := NewFence(clk, 4*time.Second)
	inner := &fakeLock{}
	lock := f.Lock(inner)
	ctx := context.Background()
	mine := resourcelock.LeaderElectionRecord{HolderIdentity: "me"}

	if f.Open() {
		t.Fatal("open before any renewal")
	}
	if err := lock.Create(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if !f.Open() {
		t.Fatal("closed right after acquiring")
	}
	clk.Step(3 * time.Second)
	if err := lock.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	clk.Step(3 * time.Second)
	if !f.Open() {
		t.Error("closed 3s after a renewal, with a validity of 4s")
	}
	inner.fail = errors.New("conflict")
	_ = lock.Update(ctx, mine)
	clk.Step(time.Second + time.Millisecond)
	if f.Open() {
		t.Error("open 4s after the last successful renewal (a failed one does not count)")
	}
	inner.fail = nil
	if err := lock.Update(ctx, mine); err != nil {
		t.Fatal(err)
	}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{}); err != nil { // release
		t.Fatal(err)
	}
	if f.Open() {
		t.Error("open after releasing the Lease")
	}
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{HolderIdentity: "other"}); err != nil {
		t.Fatal(err)
	}
	if f.Open() {
		t.Error("open after writing another holder into the Lease")
	}
}

func TestFenceTransports(t *testing.T) {
	var agents []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		agents = append(agents, r.UserAgent())
	}))
	defer srv.Close()
	clk := clocktesting.NewFakeClock(time.Now())
	f := NewFence(clk, 4*time.Second)
	api := &http.Client{Transport: f.APITransport(http.DefaultTransport)}
	hooks := &http.Client{Transport: f.HookTransport("vacate-controller/me")(http.DefaultTransport)}
	call := func(c *http.Client, method string) error {
		req, _ := http.NewRequest(method, srv.URL, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	// Closed: reads go through, writes and hook calls are refused.
	if err := call(api, http.MethodGet); err != nil {
		t.Errorf("GET refused while closed: %v", err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if err := call(api, m); !IsNotLeader(err) {
			t.Errorf("%s while closed: %v, want ErrNotLeader", m, err)
		}
	}
	if err := call(hooks, http.MethodGet); !IsNotLeader(err) {
		t.Errorf("hook GET while closed: %v, want ErrNotLeader", err)
	}

	// Open: everything goes through; hook calls carry the identity.
	_ = f.Lock(&fakeLock{}).Update(context.Background(), resourcelock.LeaderElectionRecord{HolderIdentity: "me"})
	if err := call(api, http.MethodPatch); err != nil {
		t.Errorf("PATCH refused while open: %v", err)
	}
	if err := call(hooks, http.MethodPost); err != nil {
		t.Errorf("hook POST refused while open: %v", err)
	}
	if got := agents[len(agents)-1]; got != "vacate-controller/me" {
		t.Errorf("hook call's User-Agent %q", got)
	}
}
