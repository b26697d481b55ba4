package redis_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/testservers/redis"
)

// TestRecipe runs examples/redis-sentinel/vacate-hook.yaml against three real
// members (redis-server and redis-sentinel each) under a client load whose
// every write is acknowledged by WAIT 1:
//
//  1. a replica's member drains (Decommission): Completed at once, the
//     primary stays where it is;
//  2. the primary's member drains while a replica is frozen, so its offset
//     cannot catch up; the drain is cancelled while writes are paused: the
//     evacuate command is killed and cancel resumes the writes, the primary
//     stays;
//  3. the primary's member drains while no replica runs: the failover is
//     refused with a message, nothing is paused, and again once they are back;
//  4. the primary's member drains (Maintenance): status says Completed only
//     once the sentinels agree on another primary and the member is a
//     replica (the system's view is sampled throughout), then the member is
//     stopped as its pod would be evicted and comes back as a replica.
//
// Every acknowledged write is read back at the end.
func TestRecipe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ips := []string{"127.212.0.1", "127.212.0.2", "127.212.0.3"}
	begin := time.Now()
	c, err := redis.Start(ctx, redis.Config{IPs: ips, Dir: t.TempDir(), Password: "vacate-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("3 servers and 3 sentinels settled in %s", time.Since(begin).Round(time.Millisecond))
	t.Cleanup(c.Stop)
	load := c.StartLoad(ctx, redis.LoadOptions{})
	progress := func(n int) {
		t.Helper()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if err := load.WaitProgress(wctx, n); err != nil {
			t.Fatal(err)
		}
	}
	progress(20)
	hooks := make([]*hookRunner, len(ips))
	for i := range ips {
		hooks[i] = newHookRunner(t, c.SidecarEnv(i), fmt.Sprintf("node-%d", i))
	}
	primary := primaryIndex(ctx, t, c)

	t.Log("1. a replica's member drains: Completed at once, nothing fails over")
	r := (primary + 1) % len(ips)
	msg, err := hooks[r].drain(ctx, "Decommission", func(state, msg string) {
		if state != "Completed" {
			t.Errorf("status on replica %d: %s: %s, want Completed at once", r, state, msg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replica %d: %s", r, msg)
	if p := primaryIndex(ctx, t, c); p != primary {
		t.Fatalf("after a replica's drain the primary is member %d, want %d", p, primary)
	}

	t.Log("2. the primary's member drains, a replica cannot catch up, cancel while writes are paused")
	cancelMidPause(ctx, t, c, hooks[primary], primary, (primary+2)%len(ips))
	if p := primaryIndex(ctx, t, c); p != primary {
		t.Fatalf("after a cancelled drain the primary is member %d, want %d", p, primary)
	}
	progress(20)
	t.Logf("longest outage so far: %s", load.LongestOutageSince(time.Time{}).Round(time.Millisecond))

	t.Log("3. the primary's member drains with no replica running: refused, nothing paused")
	refused(ctx, t, c, hooks[primary], primary)
	progress(20)

	t.Log("4. the primary's member drains under load: Completed once the primary is elsewhere and the sentinels agree")
	start := time.Now()
	drainPrimary(ctx, t, c, hooks[primary], primary)
	progress(20)
	t.Logf("longest outage of the clients through the failover: %s", load.LongestOutageSince(start).Round(time.Millisecond))
	t.Logf("member %d's pod is evicted (stopped) and comes back", primary)
	if err := c.StopMember(primary); err != nil {
		t.Fatal(err)
	}
	progress(20)
	if err := c.StartMember(primary); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
	progress(20)

	report, err := load.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(report)
	if err := report.OK(); err != nil {
		t.Fatal(err)
	}
}

// primaryIndex is the member the sentinels agree is the primary, waiting
// for them to agree.
func primaryIndex(ctx context.Context, t *testing.T, c *redis.Cluster) int {
	t.Helper()
	var p int
	err := retry(ctx, func() error {
		var err error
		p, err = c.View(ctx).PrimaryIndex()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// notPaused checks that member i's server takes a write now.
func notPaused(ctx context.Context, t *testing.T, c *redis.Cluster, i int) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Client(c.Member(i).Server.Addr).Set(wctx, "probe", "x", 0).Err(); err != nil {
		t.Fatalf("a write to member %d: %v", i, err)
	}
}

func cancelMidPause(ctx context.Context, t *testing.T, c *redis.Cluster, h *hookRunner, primary, frozen int) {
	t.Helper()
	addr, frozenAddr := c.Member(primary).Server.Addr, c.Member(frozen).Server.Addr
	if err := c.Member(frozen).Server.Freeze(); err != nil {
		t.Fatal(err)
	}
	// The frozen replica acknowledges nothing more; wait until the primary
	// is past the last offset it acknowledged, so the failover must wait.
	if err := retry(ctx, func() error {
		ps, _ := c.View(ctx).Server(addr)
		for _, r := range ps.Replicas {
			if r.Addr == frozenAddr && r.State == "online" && r.Offset < ps.Offset {
				return nil
			}
		}
		return fmt.Errorf("primary %s at %d, replicas %+v", addr, ps.Offset, ps.Replicas)
	}); err != nil {
		t.Fatal(err)
	}
	h.begin()
	ectx, kill := context.WithCancel(ctx)
	paused := make(chan struct{})
	var once sync.Once
	done := make(chan error, 1)
	go func() {
		msg, err := h.evacuate(ectx, "Maintenance", func(line string) {
			t.Logf("evacuate on member %d: %s", primary, line)
			if strings.Contains(line, "writes paused") {
				once.Do(func() { close(paused) })
			}
		})
		if err == nil {
			err = fmt.Errorf("evacuate succeeded: %s", msg)
		}
		done <- err
	}()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("evacuate ended before it paused writes: %v", err)
	}
	// vacate cancels: vacate-hook kills the running command, then runs cancel.
	kill()
	t.Logf("evacuate killed: %v", <-done)
	pctx, pcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err := c.Client(addr).Set(pctx, "probe", "x", 0).Err()
	pcancel()
	if err == nil {
		t.Fatal("a write went through the primary before cancel: the failover did not pause writes")
	}
	if err := h.cancel(ctx); err != nil {
		t.Fatal(err)
	}
	notPaused(ctx, t, c, primary)
	if err := c.Member(frozen).Server.Thaw(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
}

func refused(ctx context.Context, t *testing.T, c *redis.Cluster, h *hookRunner, primary int) {
	t.Helper()
	var replicas []int
	for i := range c.Members() {
		if i != primary {
			replicas = append(replicas, i)
			if err := c.Member(i).Server.Stop(); err != nil {
				t.Fatal(err)
			}
		}
	}
	h.begin()
	for range 2 {
		msg, err := h.evacuate(ctx, "Maintenance", nil)
		if err == nil {
			t.Fatalf("evacuate succeeded with no replica running: %s", msg)
		}
		t.Logf("evacuate refused: %s", msg)
		if !strings.Contains(msg, "refused") {
			t.Fatalf("evacuate's message %q does not say the failover is refused", msg)
		}
		notPaused(ctx, t, c, primary)
	}
	if p := primaryIndex(ctx, t, c); p != primary {
		t.Fatalf("after a refused failover the primary is member %d, want %d", p, primary)
	}
	for _, i := range replicas {
		if err := c.Member(i).Server.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WaitSettled(ctx); err != nil {
		t.Fatal(err)
	}
}

func drainPrimary(ctx context.Context, t *testing.T, c *redis.Cluster, h *hookRunner, primary int) {
	t.Helper()
	addr := c.Member(primary).Server.Addr
	// moved says whether a view shows what Completed promises: the sentinels
	// agree on a primary that is not this member, which is a replica.
	moved := func(v redis.View) error {
		p, err := v.AgreedPrimary()
		if err != nil {
			return err
		}
		if p == addr {
			return fmt.Errorf("the sentinels still name %s", addr)
		}
		if s, _ := v.Server(addr); s.Role != "slave" {
			return fmt.Errorf("%s is a %q (%v), not a replica", addr, s.Role, s.Err)
		}
		return nil
	}
	var (
		mu        sync.Mutex
		completed bool
		samples   int
		after     []error
		sawBefore bool
	)
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for sctx.Err() == nil {
			v := c.View(sctx)
			if sctx.Err() != nil {
				return // a view cut short
			}
			err := moved(v)
			mu.Lock()
			samples++
			if completed {
				after = append(after, err)
			} else if err != nil {
				sawBefore = true
			}
			mu.Unlock()
			select {
			case <-sctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	msg, err := h.drain(ctx, "Maintenance", func(state, msg string) {
		if state != "Completed" {
			return
		}
		if err := moved(c.View(ctx)); err != nil {
			t.Errorf("status said Completed (%s) but %v", msg, err)
		}
		mu.Lock()
		completed = true
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	// Sample a little after Completed, until at least 10 more views.
	err = retry(ctx, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(after) < 10 {
			return fmt.Errorf("%d views after Completed", len(after))
		}
		return nil
	})
	stop()
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range after {
		if e != nil {
			t.Errorf("a view after Completed: %v", e)
		}
	}
	if !sawBefore {
		t.Error("no view before Completed showed the member as primary: the sampling missed the failover")
	}
	t.Logf("primary's member %d: %s (%d views sampled)", primary, msg, samples)
}
