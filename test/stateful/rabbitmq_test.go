package stateful_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/clock"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/cli"
	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testservers/rabbitmq"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// TestRabbitMQ drains RabbitMQ (three nodes, the real servers, one node
// per pod of the RabbitMQ Cluster Operator's shape, its preStop included)
// with examples/rabbitmq under a client load of publishers whose every
// message is confirmed by the broker and a consumer, on three quorum
// queues; each node is also the only home of two classic queues, stored-i
// (40 messages nobody consumes until the test does) and live-i:
//
//  1. node 0's Maintenance (its sidecar with CLASSIC_QUEUES_IN_MAINTENANCE
//     =wait) waits until stored-0 is empty, then, held by a tightened PDB
//     once RabbitMQ answered Completed (node 0 in maintenance), is
//     cancelled: vacate-hook revives node 0, which takes clients again, and
//     its pod stays;
//  2. the Maintenance of the node of a member x that leads queues: the
//     member is in maintenance and leads no quorum queue before its pod is
//     evicted; the hook's Completed names what is unavailable while it is
//     away (its classic queues, a stream whose only replica is there); the
//     drain is Drained;
//  3. that node comes back (the drain is cancelled, its pod replaced) but
//     its RabbitMQ member is still stopped: a Decommission of another
//     member y that leads queues is held by RabbitMQ's own refusal (it is
//     quorum-critical), then, once x starts, by an exclusive queue on y
//     holding messages (status.hooks, `vacate explain`, `vacate plan`);
//  4. once that queue's connection closes, y is shrunk away and its classic
//     queues move, with their messages, while publishers keep publishing to
//     live-y; held there by a step the test adds after the recipe's, the
//     Decommission is cancelled: y is a member of its quorum queues again,
//     and of no queue it was not in (the shrink's record is gone);
//  5. y's Decommission again, held while a stream has its only replica on
//     y, until the test adds one on another node, then to the end: y leaves
//     every quorum queue, only while the other members hold each one, and
//     is the home of no classic queue before its pod is evicted; each
//     evicted pod's preStop ends at once;
//  6. every confirmed message is consumed, none twice, and every stored
//     message is there (through another node for y's).
//
// RabbitMQ's own view (running nodes, maintenance, each queue's leader,
// members and online members, each classic queue's home) is sampled
// throughout through one Erlang node connected to the cluster.
func TestRabbitMQ(t *testing.T) {
	// The operator's pods carry emptyDir volumes (the cookie, the plugins
	// file, the sidecar's state) holding nothing to keep: the nodes' policy
	// evicts such pods, as docs/recipes/rabbitmq.md says to set it.
	a := newShapedApp(t, "rabbitmq", rabbitmqOperatorShape(t), func(p *v1alpha1.DrainPolicySpec) { p.Pods.LocalStorage = "Evict" })
	ctx := testenv.Context(t)
	start := time.Now()
	rc, err := rabbitmq.Start(ctx, rabbitmq.Config{IPs: a.IPs(), Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rc.Stop() })
	t.Logf("three RabbitMQ nodes running and clustered after %s", time.Since(start).Round(100*time.Millisecond))
	queues := make([]string, rc.Size())
	for i := range queues {
		// Declared through member i, which leads it at first.
		queues[i] = fmt.Sprintf("orders-%d", i)
		if err := rc.DeclareQuorumQueue(i, queues[i]); err != nil {
			t.Fatal(err)
		}
	}
	// Classic queues, each living only on the member that declared it:
	// live-i carries a load of its own during the Decommission of member
	// i, stored-i holds messages nobody consumes until the test does.
	stored := map[int][]string{}
	for i := range rc.Size() {
		for _, q := range []string{fmt.Sprintf("live-%d", i), fmt.Sprintf("stored-%d", i)} {
			if err := rc.DeclareClassicQueue(i, q); err != nil {
				t.Fatal(err)
			}
		}
		ids, err := rc.Fill(i, fmt.Sprintf("stored-%d", i), fmt.Sprintf("stored-%d", i), 40)
		if err != nil {
			t.Fatal(err)
		}
		stored[i] = ids
	}
	sidecars := make([]*sidecarProc, len(a.pods))
	holds := make([]string, len(a.pods))
	for i := range a.pods {
		env := rc.Env(i)
		if i == 0 {
			// Node 0's Maintenance waits until its classic queues are empty.
			env = append(env, "CLASSIC_QUEUES_IN_MAINTENANCE=wait")
		}
		holds[i] = filepath.Join(t.TempDir(), "hold")
		sidecars[i] = a.startSidecarWith(t, i, "rabbitmq", env, rabbitmqHoldAfterMove(holds[i]))
	}
	// An evicted pod's containers stop as the kubelet stops them: the
	// node's preStop hook (the operator's, as the recipe overrides it) runs
	// first, then the node stops, then its native sidecar.
	preStops := make([][]string, len(a.pods))
	for i := range a.pods {
		preStops[i] = rabbitmqPreStop(t, a, i)
		if !strings.Contains(strings.Join(preStops[i], " "), "is_under_maintenance") {
			t.Fatalf("pod %s's preStop is %q: want the operator's with the recipe's line for a node in maintenance", a.pods[i].Name, preStops[i])
		}
	}
	var preStopMu sync.Mutex
	var preStopRuns []preStopRun
	a.setOnEvict(func(i int) {
		run := rabbitmqRunPreStop(a, rc, preStops[i], i)
		preStopMu.Lock()
		preStopRuns = append(preStopRuns, run)
		preStopMu.Unlock()
		if err := rc.StopMember(i); err != nil {
			t.Errorf("stopping member %d: %v", i, err)
		}
		sidecars[i].stop()
	})
	rv := rabbitmqStartViewer(t, rc)
	view := sampleView(t, 200*time.Millisecond, rv.view)
	load := rabbitmq.StartLoad(rabbitmq.LoadConfig{URLs: rc.URLs(), Queues: queues, Pause: 100 * time.Millisecond})
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			load.Stop(sctx)
		}
	})
	rabbitmqWaitAcks(ctx, t, load, "the load to write")

	t.Log("1. a drain of node 0's node, held by the PDB after RabbitMQ put node 0 in maintenance, is cancelled")
	rabbitmqSetPDB(ctx, t, a, 0)
	a.drain(t, 0, v1alpha1.ModeMaintenance)
	t.Log("   node 0's sidecar waits until the classic queues that live only on node 0 are empty")
	nd := a.waitDrain(t, 0, "held until node 0's classic queues are empty", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[0].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationInProgress) && strings.Contains(h.Message, "waiting until the classic queue(s)") &&
			strings.Contains(h.Message, "'stored-0'")
	})
	if said := a.explainPod(t, nd, 0); !strings.Contains(said, "'stored-0'") {
		t.Errorf("vacate explain says of %s %q: want the classic queue it waits for", a.pods[0].Name, said)
	}
	if _, ok := a.evictedAt(0); ok {
		t.Fatal("node 0's pod was evicted while its classic queue held messages")
	}
	took, err := rc.Take(1, "stored-0")
	if err != nil || !slices.Equal(took, stored[0]) {
		t.Fatalf("consuming stored-0 through node 1: %v (%d of %d messages, in order: %v)", err, len(took), len(stored[0]), slices.Equal(took, stored[0]))
	}
	delete(stored, 0)
	nd = a.waitDrain(t, 0, "held by the PDB with node 0 drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[0].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationCompleted) && rabbitmqBlocked(nd, a.pods[0].Name, v1alpha1.BlockerPDB)
	})
	if v := rabbitmqParseView(rv.view(ctx)); !v.inMaintenance(0) || len(v.ledBy(0)) > 0 {
		t.Fatalf("the hook said Completed but RabbitMQ says %s: want node 0 in maintenance, leading no queue", v)
	}
	if rc.AcceptsClients(0) {
		t.Fatal("node 0 in maintenance takes a new client")
	}
	h, _ := rabbitmqHook(nd, a.pods[0].Name)
	t.Logf("held: hook %s %q; RabbitMQ: %s", h.Phase, h.Message, rv.view(ctx))
	a.cancel(t, 0)
	waitUndone(ctx, t, a, 0)
	testutil.Eventually(t, 2*time.Minute, "node 0 revived, taking clients, its replicas online", func() error {
		v := rabbitmqParseView(rv.view(ctx))
		if !v.inMaintenance(0) && len(v.withOnline(0)) == len(queues) && rc.AcceptsClients(0) {
			return nil
		}
		return errors.New("seen:\n" + rv.view(ctx) + "\n" + sidecars[0].logText())
	})
	if !logLine(sidecars[0].logText(), "rabbitmq-upgrade", "revive") {
		t.Errorf("vacate-hook did not run the recipe's cancel (rabbitmq-upgrade revive):\n%s", sidecars[0].logText())
	}
	if _, ok := a.evictedAt(0); ok {
		t.Fatal("node 0's pod was evicted by a cancelled drain")
	}
	rabbitmqSetPDB(ctx, t, a, 1)
	rabbitmqWaitAcks(ctx, t, load, "the load to write after the cancel")

	leads := rabbitmqParseView(rv.view(ctx))
	x := rabbitmqLeader(t, leads, 1, 2)
	t.Logf("2. Maintenance of node %d's node (%s, pod %s), which leads %v", x, a.nodes[x], a.pods[x].Name, leads.ledBy(x))
	// A stream whose only replica is node x's: unavailable while x is away.
	streamX := rabbitmqDeclareStream(t, rc, x, fmt.Sprintf("stream-%d", x))
	drainStart := time.Now()
	a.drain(t, x, v1alpha1.ModeMaintenance)
	completed := ""
	nd = a.waitDrain(t, x, "Drained", 3*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		if h, ok := rabbitmqHook(nd, a.pods[x].Name); ok && h.Phase == string(v1alpha1.EvacuationCompleted) {
			completed = h.Message
		}
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	storedX := fmt.Sprintf("'stored-%d'", x)
	if !strings.Contains(completed, "unavailable until "+rc.NodeName(x)+" returns, living only there") || !strings.Contains(completed, storedX+" in vhost '/' (40 messages)") ||
		!strings.Contains(completed, "stream '"+streamX+"' in vhost '/'") {
		t.Errorf("the hook's Completed said %q: want what is unavailable while node %d is away: %s with its 40 messages, stream %s", completed, x, storedX, streamX)
	}
	evicted, ok := a.evictedAt(x)
	if !ok {
		t.Fatalf("the drain is %s but pod %s was not seen evicted", nd.Status.Phase, a.pods[x].Name)
	}
	before, _ := view.before(evicted)
	if v := rabbitmqParseView(before); !v.inMaintenance(x) || len(v.ledBy(x)) > 0 || len(v.queues) != len(queues) {
		t.Fatalf("when its pod was evicted, RabbitMQ said %q: want node %d in maintenance, leading none of %d queues; views:%s", before, x, len(queues), view.changes())
	}
	if !rabbitmqSampled(view, func(v rabbitmqView) bool { return len(v.ledBy(x)) > 0 }) {
		t.Fatalf("the views sampled never showed node %d leading a queue, so they prove nothing:%s", x, view.changes())
	}
	maintenanceTook := evicted.Sub(drainStart)
	rabbitmqWaitAcks(ctx, t, load, "the load to write after the eviction")

	t.Logf("3. node %d's node comes back with RabbitMQ still stopped; a Decommission of another leader is refused, then goes on", x)
	a.cancel(t, x)
	waitUndone(ctx, t, a, x)
	if _, err := devcluster.WaitForPDB(ctx, a.c.Client, a.ns, a.name, 3, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	y := rabbitmqLeader(t, rabbitmqParseView(rv.view(ctx)), (x+1)%3, (x+2)%3)
	// Publishers keep publishing to live-y, a classic queue that lives only
	// on node y, all through its move; an exclusive queue there holds
	// messages that cannot be moved.
	liveY := fmt.Sprintf("live-%d", y)
	load2 := rabbitmq.StartLoad(rabbitmq.LoadConfig{URLs: rc.URLs(), Queues: []string{liveY}, Pause: 50 * time.Millisecond})
	stopped2 := false
	t.Cleanup(func() {
		if !stopped2 {
			sctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			load2.Stop(sctx)
		}
	})
	rabbitmqWaitAcks(ctx, t, load2, "the load on "+liveY+" to write")
	exclusive, exclusiveConn, err := rc.HoldExclusive(y, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exclusiveConn.Close() })
	decomStart := time.Now()
	a.drain(t, y, v1alpha1.ModeDecommission)
	nd = a.waitDrain(t, y, "held by RabbitMQ's refusal", 2*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[y].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationInProgress) && strings.Contains(h.Message, "would lose quorum")
	})
	h, _ = rabbitmqHook(nd, a.pods[y].Name)
	said := a.explainPod(t, nd, y)
	t.Logf("held: status.hooks %q; vacate explain: %q", h.Message, said)
	if !strings.Contains(said, "would lose quorum") {
		t.Errorf("vacate explain says of %s %q: want RabbitMQ's refusal (would lose quorum)", a.pods[y].Name, said)
	}
	if _, ok := a.evictedAt(y); ok {
		t.Fatalf("pod %s was evicted while RabbitMQ refused", a.pods[y].Name)
	}
	if v := rabbitmqParseView(rv.view(ctx)); v.inMaintenance(y) || len(v.withMember(y)) != len(queues) {
		t.Fatalf("while refusing, RabbitMQ says %s: want node %d out of maintenance and a member of all %d queues", v, y, len(queues))
	}
	if err := rc.StartMember(ctx, x); err != nil {
		t.Fatal(err)
	}
	t.Logf("   node %d is back; the exclusive queue %s on node %d, with 3 messages, holds the drain", x, exclusive, y)
	nd = a.waitDrain(t, y, "held by the exclusive queue", 4*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[y].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationInProgress) && strings.Contains(h.Message, "'"+exclusive+"'") && strings.Contains(h.Message, "cannot be moved")
	})
	h, _ = rabbitmqHook(nd, a.pods[y].Name)
	said = a.explainPod(t, nd, y)
	t.Logf("held: status.hooks %q; vacate explain: %q", h.Message, said)
	if !strings.Contains(said, "'"+exclusive+"'") {
		t.Errorf("vacate explain says of %s %q: want the exclusive queue that holds it", a.pods[y].Name, said)
	}
	if planned := rabbitmqPlan(t, a, y); !strings.Contains(planned, "'"+exclusive+"'") {
		t.Errorf("vacate plan says %q: want the hook's last answer, naming the exclusive queue", planned)
	}
	if _, ok := a.evictedAt(y); ok {
		t.Fatalf("pod %s was evicted while its exclusive queue held messages", a.pods[y].Name)
	}
	// A quorum queue of another vhost that node y is no member of: the
	// cancel below gives y back what its shrink took, and nothing more.
	invoices := rabbitmqQuorumQueueWithout(ctx, t, rc, x, y, "billing", "invoices")

	t.Logf("4. node %d's Decommission, held after its shrink and move, is cancelled: node %d is a member of its quorum queues again", y, y)
	if err := os.WriteFile(holds[y], nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exclusiveConn.Close(); err != nil {
		t.Fatal(err)
	}
	nd = a.waitDrain(t, y, "held after node y's shrink and move", 6*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[y].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationInProgress) && strings.Contains(h.Message, rabbitmqHeld)
	})
	h, _ = rabbitmqHook(nd, a.pods[y].Name)
	t.Logf("held: status.hooks %q", h.Message)
	v := rabbitmqParseView(rv.view(ctx))
	if len(v.withMember(y)) > 0 {
		t.Fatalf("after the shrink RabbitMQ says %s: want node %d a member of no quorum queue", v, y)
	}
	for _, q := range []string{liveY, fmt.Sprintf("stored-%d", y)} {
		if c, ok := v.classic(q); !ok || c.home == y || c.home < 0 {
			t.Fatalf("after the move RabbitMQ says %s: want classic queue %s living on another node than %d", v, q, y)
		}
	}
	a.cancel(t, y)
	waitUndone(ctx, t, a, y)
	testutil.Eventually(t, 2*time.Minute, fmt.Sprintf("node %d revived, a member of its quorum queues again", y), func() error {
		v := rabbitmqParseView(rv.view(ctx))
		if !v.inMaintenance(y) && len(v.withMember(y)) == len(queues) && len(v.withOnline(y)) == len(queues) && rc.AcceptsClients(y) {
			return nil
		}
		return errors.New("seen:\n" + rv.view(ctx) + "\n" + sidecars[y].logText())
	})
	if !logLine(sidecars[y].logText(), "rabbitmq.sh", "grow") {
		t.Errorf("vacate-hook did not run the recipe's cancel (rabbitmq.sh grow):\n%s", sidecars[y].logText())
	}
	if members := rabbitmqMembers(ctx, t, rc, x, "billing", invoices); slices.Contains(members, rc.NodeName(y)) {
		t.Errorf("the cancel made node %d a member of %s in vhost billing, which it never was: members %v", y, invoices, members)
	}
	if out, err := rc.CLI(ctx, x, "rabbitmqctl", "-q", "list_global_parameters", "--no-table-headers"); err != nil || strings.Contains(string(out), "vacate-shrunk-") {
		t.Errorf("after the cancel, the cluster's global parameters are %q (%v): want the shrink's record gone", out, err)
	}
	// Every recipe command lists the queues of each vhost: one more VM each.
	if _, err := rc.CLI(ctx, x, "rabbitmqctl", "delete_vhost", "billing"); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.evictedAt(y); ok {
		t.Fatalf("pod %s was evicted by a cancelled drain", a.pods[y].Name)
	}
	if err := os.Remove(holds[y]); err != nil {
		t.Fatal(err)
	}

	t.Logf("5. node %d's Decommission again, held by a stream whose only replica is on node %d until it has another, then to the end", y, y)
	streamY := rabbitmqDeclareStream(t, rc, y, fmt.Sprintf("stream-%d", y))
	decomStart2 := time.Now()
	a.drain(t, y, v1alpha1.ModeDecommission)
	nd = a.waitDrain(t, y, "held by the stream on node y alone", 4*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		h, ok := rabbitmqHook(nd, a.pods[y].Name)
		return ok && h.Phase == string(v1alpha1.EvacuationInProgress) && strings.Contains(h.Message, "stream '"+streamY+"'") &&
			strings.Contains(h.Message, "moves no stream")
	})
	h, _ = rabbitmqHook(nd, a.pods[y].Name)
	t.Logf("held: status.hooks %q", h.Message)
	if _, ok := a.evictedAt(y); ok {
		t.Fatalf("pod %s was evicted while its stream had no other replica", a.pods[y].Name)
	}
	z := 3 - x - y
	if _, err := rc.CLI(ctx, z, "rabbitmq-streams", "add_replica", "--vhost", "/", streamY, rc.NodeName(z)); err != nil {
		t.Fatal(err)
	}
	nd = a.waitDrain(t, y, "Drained", 4*time.Minute, func(nd *v1alpha1.NodeDrain) bool {
		return nd.Status.Phase == v1alpha1.PhaseDrained
	})
	evicted, ok = a.evictedAt(y)
	if !ok {
		t.Fatalf("the drain is %s but pod %s was not seen evicted", nd.Status.Phase, a.pods[y].Name)
	}
	before, _ = view.before(evicted)
	v = rabbitmqParseView(before)
	if len(v.withMember(y)) > 0 || len(v.queues) != len(queues) {
		t.Fatalf("when its pod was evicted, RabbitMQ said %q: want node %d a member of none of %d queues; views:%s", before, y, len(queues), view.changes())
	}
	for _, q := range []string{liveY, fmt.Sprintf("stored-%d", y)} {
		if c, ok := v.classic(q); !ok || c.home == y || c.home < 0 {
			t.Fatalf("when its pod was evicted, RabbitMQ said %q: want classic queue %s living on another node than %d", before, q, y)
		}
	}
	if !rabbitmqSampledSince(view, decomStart, func(v rabbitmqView) bool { c, ok := v.classic(liveY); return ok && c.home == y }) {
		t.Fatalf("the views sampled during the Decommission never showed %s on node %d:%s", liveY, y, view.changes())
	}
	if !rabbitmqSampledSince(view, decomStart, func(v rabbitmqView) bool { return len(v.withMember(y)) == len(queues) }) {
		t.Fatalf("the views sampled during the Decommission never showed node %d a member of every queue:%s", y, view.changes())
	}
	// Shrunk away only while the other members hold every queue: in every
	// view where a queue lacks node y, all its members are online.
	for _, s := range rabbitmqSamples(view) {
		v := rabbitmqParseView(s.view)
		for _, q := range v.queues {
			if !slices.Contains(q.members, y) && !s.at.After(evicted) && len(q.online) != len(q.members) {
				t.Errorf("at %s queue %s had lost node %d with a member offline: %s", s.at.Format("15:04:05.000"), q.name, y, s.view)
			}
		}
	}
	decomTook := evicted.Sub(decomStart2)
	rabbitmqWaitAcks(ctx, t, load, "the load to write after the Decommission")
	rabbitmqWaitAcks(ctx, t, load2, "the load on "+liveY+" to write after the Decommission")
	sctx2, cancel2 := context.WithTimeout(ctx, time.Minute)
	defer cancel2()
	rep2 := load2.Stop(sctx2)
	stopped2 = true
	t.Logf("%s: %s; %d redeliveries", liveY, rep2, load2.Redeliveries())
	if err := rep2.OK(); err != nil {
		t.Errorf("the load on %s, moved off node %d: %v", liveY, y, err)
	}
	// The messages stored on node y moved with their queue; those of node x
	// stayed on it through its Maintenance, and are there again.
	for i, from := range map[int]int{y: (y + 1) % 3, x: x} {
		if i == 0 {
			continue // consumed in step 1
		}
		took, err := rc.Take(from, fmt.Sprintf("stored-%d", i))
		if err != nil || !slices.Equal(took, stored[i]) {
			t.Errorf("consuming stored-%d through node %d: %v (%d of %d messages, the same in order: %v)", i, from, err, len(took), len(stored[i]), slices.Equal(took, stored[i]))
		} else {
			t.Logf("stored-%d: all %d messages consumed through node %d", i, len(took), from)
		}
	}

	// The preStop of each evicted pod (the node was in maintenance after
	// vacate's drain) ended at once, without waiting for quorum replicas.
	// Each runs after its pod was seen evicted, as the kubelet runs it:
	// wait for the last one to end.
	var runs []preStopRun
	testutil.Eventually(t, 2*time.Minute, "the preStops of the Maintenance and the Decommission evictions to end", func() error {
		preStopMu.Lock()
		runs = slices.Clone(preStopRuns)
		preStopMu.Unlock()
		if len(runs) == 2 {
			return nil
		}
		return fmt.Errorf("%d ended: %+v", len(runs), runs)
	})
	for _, r := range runs {
		t.Logf("preStop of member %d: %v after %s: %q", r.ordinal, r.err, r.took.Round(time.Millisecond), r.output)
		if r.err != nil || strings.Contains(r.output, "timed out") {
			t.Errorf("the preStop of member %d: %v, output %q: want it to end at once, the node being in maintenance", r.ordinal, r.err, r.output)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	rep := load.Stop(sctx)
	stopped = true
	t.Logf("%s; %d redeliveries; Maintenance took %s, the last Decommission %s (from the request to the eviction); views:%s",
		rep, load.Redeliveries(), maintenanceTook.Round(time.Millisecond), decomTook.Round(time.Millisecond), view.changes())
	if err := rep.OK(); err != nil {
		t.Fatal(err)
	}
}

// rabbitmqHeld is what the step rabbitmqHoldAfterMove adds says.
const rabbitmqHeld = "held by the test after shrink and move"

// rabbitmqHoldAfterMove adds a last step to the recipe's Decommission
// evacuate that fails while the file hold exists: the only way to hold a
// Decommission at will between its shrink and its hook's Completed (vacate
// does not cancel a Decommission whose hook answered Completed: what it
// moved stays moved).
func rabbitmqHoldAfterMove(hold string) func(map[string]any) {
	return func(cfg map[string]any) {
		d := cfg["decommission"].(map[string]any)
		d["evacuate"] = append(d["evacuate"].([]any), map[string]any{
			"command": []any{"sh", "-c", fmt.Sprintf("if [ -e %q ]; then echo %q; exit 1; fi", hold, rabbitmqHeld)},
			"timeout": "10s",
		})
	}
}

// rabbitmqDeclareStream declares a stream through member via, its only
// replica there.
func rabbitmqDeclareStream(t *testing.T, rc *rabbitmq.Cluster, via int, name string) string {
	t.Helper()
	rabbitmqDeclare(t, rc, via, "", name, amqp.Table{"x-queue-type": "stream", "x-initial-cluster-size": 1})
	return name
}

// rabbitmqDeclare declares a durable queue in a vhost ("" for "/")
// through member via.
func rabbitmqDeclare(t *testing.T, rc *rabbitmq.Cluster, via int, vhost, name string, args amqp.Table) {
	t.Helper()
	conn, err := amqp.Dial(rc.URL(via) + vhost)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		t.Fatal(err)
	}
}

// rabbitmqQuorumQueueWithout declares a quorum queue in a vhost of its own
// through member via, then takes member without out of it.
func rabbitmqQuorumQueueWithout(ctx context.Context, t *testing.T, rc *rabbitmq.Cluster, via, without int, vhost, name string) string {
	t.Helper()
	for _, args := range [][]string{{"add_vhost", vhost}, {"set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"}} {
		if _, err := rc.CLI(ctx, via, "rabbitmqctl", args...); err != nil {
			t.Fatal(err)
		}
	}
	rabbitmqDeclare(t, rc, via, vhost, name, amqp.Table{"x-queue-type": "quorum"})
	if _, err := rc.CLI(ctx, via, "rabbitmq-queues", "delete_member", "--vhost", vhost, name, rc.NodeName(without)); err != nil {
		t.Fatal(err)
	}
	if members := rabbitmqMembers(ctx, t, rc, via, vhost, name); len(members) < 2 || slices.Contains(members, rc.NodeName(without)) {
		t.Fatalf("quorum queue %s in vhost %s has members %v: want at least two, without %s", name, vhost, members, rc.NodeName(without))
	}
	return name
}

// rabbitmqMembers lists a quorum queue's members, as RabbitMQ says.
func rabbitmqMembers(ctx context.Context, t *testing.T, rc *rabbitmq.Cluster, via int, vhost, name string) []string {
	t.Helper()
	out, err := rc.CLI(ctx, via, "rabbitmqctl", "-q", "list_queues", "-p", vhost, "--no-table-headers", "name", "members")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if q, m, ok := strings.Cut(l, "\t"); ok && q == name {
			return strings.Split(strings.Trim(m, "[]"), ", ")
		}
	}
	t.Fatalf("no quorum queue %s in vhost %s: %q", name, vhost, out)
	return nil
}

// rabbitmqPlan is what `vacate plan` prints for the node of an ordinal.
func rabbitmqPlan(t *testing.T, a *app, i int) string {
	t.Helper()
	var out bytes.Buffer
	code := cli.Run(testenv.Context(t), []string{"plan", a.nodes[i], "--allow-loopback-hooks", "--kubeconfig", a.c.Kubeconfig},
		cli.Streams{In: strings.NewReader(""), Out: &out, Err: &out}, clock.RealClock{})
	if code != cli.ExitOK {
		t.Fatalf("vacate plan %s: exit %d: %s", a.nodes[i], code, out.String())
	}
	return out.String()
}

// rabbitmqWaitAcks waits until the load has 20 more messages confirmed.
func rabbitmqWaitAcks(ctx context.Context, t *testing.T, load *rabbitmq.Load, what string) {
	t.Helper()
	from := load.Acked()
	testutil.Eventually(t, 2*time.Minute, what, func() error {
		if acked := load.Acked(); acked < from+20 {
			return fmt.Errorf("%d messages confirmed since", acked-from)
		}
		return nil
	})
}

// rabbitmqSetPDB sets the app's PDB's maxUnavailable and waits until its
// status allows that many disruptions.
func rabbitmqSetPDB(ctx context.Context, t *testing.T, a *app, maxUnavailable int) {
	t.Helper()
	patch := fmt.Sprintf(`{"spec":{"maxUnavailable":%d}}`, maxUnavailable)
	if _, err := a.c.Client.PolicyV1().PodDisruptionBudgets(a.ns).Patch(ctx, a.name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, time.Minute, fmt.Sprintf("PDB %s with maxUnavailable %d", a.name, maxUnavailable), testutil.Holds(func() bool {
		p, err := a.c.Client.PolicyV1().PodDisruptionBudgets(a.ns).Get(ctx, a.name, metav1.GetOptions{})
		return err == nil && p.Status.ObservedGeneration == p.Generation && p.Spec.MaxUnavailable != nil &&
			*p.Spec.MaxUnavailable == intstr.FromInt32(int32(maxUnavailable)) && p.Status.DisruptionsAllowed == int32(maxUnavailable)
	}))
}

// rabbitmqHook is the drain's status.hooks entry of a pod's HTTP hook.
func rabbitmqHook(nd *v1alpha1.NodeDrain, pod string) (v1alpha1.HookStatus, bool) {
	for _, h := range nd.Status.Hooks {
		if strings.Contains(h.Name, pod) {
			return h, true
		}
	}
	return v1alpha1.HookStatus{}, false
}

// rabbitmqBlocked says whether the drain lists a pod blocked for reason.
func rabbitmqBlocked(nd *v1alpha1.NodeDrain, pod, reason string) bool {
	for _, b := range nd.Status.Blockers {
		if b.Pod == pod || strings.HasSuffix(b.Pod, "/"+pod) {
			if b.Reason == reason {
				return true
			}
		}
	}
	return false
}

// rabbitmqLeader is the first of the members that leads a queue in v.
func rabbitmqLeader(t *testing.T, v rabbitmqView, members ...int) int {
	t.Helper()
	for _, m := range members {
		if len(v.ledBy(m)) > 0 {
			return m
		}
	}
	t.Fatalf("none of members %v leads a queue: %s", members, v)
	return -1
}

// rabbitmqSamples are the views sampled so far.
func rabbitmqSamples(s *sampler) []sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.samples)
}

// rabbitmqSampled says whether some view sampled so far satisfies cond.
func rabbitmqSampled(s *sampler, cond func(rabbitmqView) bool) bool {
	return rabbitmqSampledSince(s, time.Time{}, cond)
}

// rabbitmqSampledSince says whether some view sampled after since
// satisfies cond.
func rabbitmqSampledSince(s *sampler, since time.Time, cond func(rabbitmqView) bool) bool {
	for _, x := range rabbitmqSamples(s) {
		if x.at.After(since) && cond(rabbitmqParseView(x.view)) {
			return true
		}
	}
	return false
}

// rabbitmqView is RabbitMQ's own view of the cluster, with nodes named by
// member index (-1: no node): which run, which are in maintenance, and each
// quorum queue's leader, members and online members.
type rabbitmqView struct {
	err         string
	running     []int
	maintenance []int
	queues      []rabbitmqQueue
	// classics are the classic queues: where each lives (its master's
	// node) and its synchronised mirrors.
	classics []rabbitmqClassic
}

type rabbitmqClassic struct {
	name    string
	home    int
	mirrors []int
}

// classic is the classic queue of that name, if the view has it.
func (v rabbitmqView) classic(name string) (rabbitmqClassic, bool) {
	for _, c := range v.classics {
		if c.name == name {
			return c, true
		}
	}
	return rabbitmqClassic{}, false
}

type rabbitmqQueue struct {
	name            string
	leader          int
	members, online []int
}

func (v rabbitmqView) inMaintenance(i int) bool { return slices.Contains(v.maintenance, i) }

// ledBy, withMember and withOnline are the queues node i leads, is a member
// of, is an online member of.
func (v rabbitmqView) ledBy(i int) []string {
	return v.filter(func(q rabbitmqQueue) bool { return q.leader == i })
}

func (v rabbitmqView) withMember(i int) []string {
	return v.filter(func(q rabbitmqQueue) bool { return slices.Contains(q.members, i) })
}

func (v rabbitmqView) withOnline(i int) []string {
	return v.filter(func(q rabbitmqQueue) bool { return slices.Contains(q.online, i) })
}

func (v rabbitmqView) filter(f func(rabbitmqQueue) bool) []string {
	var names []string
	for _, q := range v.queues {
		if f(q) {
			names = append(names, q.name)
		}
	}
	return names
}

// String is the view as the sampler keeps it, such as
// "running 0,1,2 maintenance 0 | orders-0 leader 1 members 0,1,2 online 1,2".
func (v rabbitmqView) String() string {
	if v.err != "" {
		return "error: " + v.err
	}
	b := fmt.Sprintf("running %s maintenance %s", rabbitmqList(v.running), rabbitmqList(v.maintenance))
	for _, q := range v.queues {
		b += fmt.Sprintf(" | %s leader %d members %s online %s", q.name, q.leader, rabbitmqList(q.members), rabbitmqList(q.online))
	}
	for _, c := range v.classics {
		b += fmt.Sprintf(" | classic %s home %d mirrors %s", c.name, c.home, rabbitmqList(c.mirrors))
	}
	return b
}

func rabbitmqList(l []int) string {
	if len(l) == 0 {
		return "-"
	}
	s := make([]string, len(l))
	for i, x := range l {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func rabbitmqParseList(s string) []int {
	var l []int
	if s == "-" {
		return l
	}
	for _, f := range strings.Split(s, ",") {
		n, _ := strconv.Atoi(f)
		l = append(l, n)
	}
	return l
}

// rabbitmqParseView reads what String wrote; anything else is an error view.
func rabbitmqParseView(s string) rabbitmqView {
	parts := strings.Split(s, " | ")
	var v rabbitmqView
	if n, _ := fmt.Sscanf(parts[0], "running %s maintenance %s", new(string), new(string)); n != 2 {
		return rabbitmqView{err: strings.TrimPrefix(s, "error: ")}
	}
	f := strings.Fields(parts[0])
	v.running, v.maintenance = rabbitmqParseList(f[1]), rabbitmqParseList(f[3])
	for _, p := range parts[1:] {
		f := strings.Fields(p)
		if len(f) == 6 && f[0] == "classic" {
			home, _ := strconv.Atoi(f[3])
			v.classics = append(v.classics, rabbitmqClassic{name: f[1], home: home, mirrors: rabbitmqParseList(f[5])})
			continue
		}
		if len(f) != 7 {
			return rabbitmqView{err: "unreadable view: " + s}
		}
		leader, _ := strconv.Atoi(f[2])
		v.queues = append(v.queues, rabbitmqQueue{name: f[0], leader: leader, members: rabbitmqParseList(f[4]), online: rabbitmqParseList(f[6])})
	}
	return v
}

// rabbitmqViewer is a hidden Erlang node connected to the cluster that
// answers, for each line it reads, the cluster's view as the first running
// member sees it (the same calls as rabbitmqctl cluster_status and
// list_queues, without starting a VM for each: a sample costs a few
// milliseconds instead of a CPU-second). It exits when its input closes,
// so it does not outlive a killed test.
type rabbitmqViewer struct {
	rc    *rabbitmq.Cluster
	mu    sync.Mutex
	in    io.WriteCloser
	out   *bufio.Reader
	names map[string]int
}

// rabbitmqViewCode is the viewer's loop; NODES is replaced with the
// members' node names. It prints one line per request:
// "running=N,N;maintenance=N;q=NAME/TYPE/LEADER/MEMBERS/ONLINE;..." or
// "error ...".
const rabbitmqViewCode = `
Nodes = NODES,
J = fun(L) when is_list(L) -> lists:join(",", [atom_to_list(X) || X <- lists:sort(L)]); (_) -> "" end,
Ask = fun(N) ->
  case rpc:call(N, rabbit_nodes, all_running, [], 2000) of
    Running when is_list(Running) ->
      Maint = [M || M <- Nodes, rpc:call(N, rabbit_maintenance, is_being_drained_local_read, [M], 2000) =:= true],
      case rpc:call(N, rabbit_amqqueue, info_all, [<<"/">>, [name, type, leader, members, online, pid, synchronised_slave_pids]], 5000) of
        Infos when is_list(Infos) ->
          Qs = [case proplists:get_value(type, I) of
                  % rabbit_classic_queue: a classic queue whose home node is down
                  T when T =:= classic; T =:= rabbit_classic_queue ->
                    Mirrors = case proplists:get_value(synchronised_slave_pids, I) of L when is_list(L) -> [node(P) || P <- L, is_pid(P)]; _ -> [] end,
                    Home = case proplists:get_value(pid, I) of P when is_pid(P) -> atom_to_list(node(P)); _ -> "" end,
                    [";c=", element(4, proplists:get_value(name, I)), "/", Home, "/", J(Mirrors)];
                  % streams: not in the view
                  T when T =:= stream; T =:= rabbit_stream_queue -> [];
                  _ ->
                    [";q=", element(4, proplists:get_value(name, I)), "/", io_lib:format("~w", [proplists:get_value(type, I)]), "/",
                     atom_to_list(proplists:get_value(leader, I)), "/", J(proplists:get_value(members, I, [])), "/",
                     J(proplists:get_value(online, I, []))]
                end || I <- Infos],
          {ok, ["running=", J(Running), ";maintenance=", J(Maint), Qs]};
        E -> {error, E}
      end;
    E -> {error, E}
  end
end,
View = fun V([], Errs) -> io_lib:format("error ~w", [Errs]);
           V([N | Rest], Errs) -> case Ask(N) of {ok, Line} -> Line; {error, E} -> V(Rest, [{N, E} | Errs]) end end,
Loop = fun L() ->
  case io:get_line("") of
    eof -> halt(0);
    _ -> io:put_chars([View(Nodes, []), "\n"]), L()
  end
end,
Loop().
`

func rabbitmqStartViewer(t *testing.T, rc *rabbitmq.Cluster) *rabbitmqViewer {
	t.Helper()
	v := &rabbitmqViewer{rc: rc, names: map[string]int{}}
	var quoted []string
	for i := 0; i < rc.Size(); i++ {
		v.names[rc.NodeName(i)] = i
		quoted = append(quoted, "'"+rc.NodeName(i)+"'")
	}
	ip := strings.SplitN(rc.NodeName(0), "@", 2)[1]
	code := strings.Replace(rabbitmqViewCode, "NODES", "["+strings.Join(quoted, ",")+"]", 1)
	cmd := exec.Command("erl", "-noshell", "-hidden", "-start_epmd", "false", "-name", "vacate-view@"+ip,
		"+S", "1:1", "+sbwt", "none", "+sbwtdcpu", "none", "+sbwtdio", "none",
		"-kernel", "inet_dist_use_interface", "{"+strings.ReplaceAll(ip, ".", ",")+"}", "-eval", code)
	cmd.Env = rc.Env(0) // the cluster's cookie and epmd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var err error
	if v.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	v.out = bufio.NewReader(out)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		v.in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	})
	if s := v.view(context.Background()); strings.HasPrefix(s, "error") {
		t.Fatalf("the viewer's first view: %s; %s", s, stderr.String())
	}
	return v
}

// view asks the viewer once and returns the view as rabbitmqView.String.
func (v *rabbitmqViewer) view(context.Context) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, err := io.WriteString(v.in, "\n"); err != nil {
		return "error: " + err.Error()
	}
	line, err := v.out.ReadString('\n')
	if err != nil {
		return "error: " + err.Error()
	}
	return v.parse(strings.TrimSpace(line)).String()
}

func (v *rabbitmqViewer) parse(line string) rabbitmqView {
	if !strings.HasPrefix(line, "running=") {
		return rabbitmqView{err: line}
	}
	index := func(name string) int {
		if i, ok := v.names[strings.Trim(name, "'")]; ok {
			return i
		}
		return -1
	}
	list := func(s string) []int {
		var l []int
		for _, n := range strings.Split(s, ",") {
			if n != "" {
				l = append(l, index(n))
			}
		}
		slices.Sort(l)
		return l
	}
	var r rabbitmqView
	for _, f := range strings.Split(line, ";") {
		key, val, _ := strings.Cut(f, "=")
		switch key {
		case "running":
			r.running = list(val)
		case "maintenance":
			r.maintenance = list(val)
		case "c":
			p := strings.Split(val, "/")
			if len(p) != 3 {
				return rabbitmqView{err: "unreadable classic queue " + val}
			}
			r.classics = append(r.classics, rabbitmqClassic{name: p[0], home: index(p[1]), mirrors: list(p[2])})
		case "q":
			p := strings.Split(val, "/")
			if len(p) != 5 {
				return rabbitmqView{err: "unreadable queue " + val}
			}
			if p[1] != "quorum" {
				continue
			}
			r.queues = append(r.queues, rabbitmqQueue{name: p[0], leader: index(p[2]), members: list(p[3]), online: list(p[4])})
		}
	}
	slices.SortFunc(r.queues, func(a, b rabbitmqQueue) int { return strings.Compare(a.name, b.name) })
	slices.SortFunc(r.classics, func(a, b rabbitmqClassic) int { return strings.Compare(a.name, b.name) })
	return r
}
