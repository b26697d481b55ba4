package nodedrain

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/api/v1alpha1"
	"github.com/vacate-dev/vacate/internal/metrics"
)

// TestEventsReferToObjectsByName: the recorder's references carry no
// resourceVersion (the broadcaster folds repeats by them, and a drain's
// changes with every status write), and keep what kubectl describe finds
// them by: kind, namespace, name, UID.
func TestEventsReferToObjectsByName(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := errors.Join(clientgoscheme.AddToScheme(scheme), v1alpha1.AddToScheme(scheme)); err != nil {
		t.Fatal(err)
	}
	meta := metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u1", ResourceVersion: "42", Labels: map[string]string{"a": "b"}}
	for _, obj := range []ctrl.Object{
		&corev1.Pod{ObjectMeta: meta},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u2", ResourceVersion: "7"}},
		&v1alpha1.NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u3", ResourceVersion: "9"}},
	} {
		ref, err := reference.GetReference(scheme, bare(obj))
		if err != nil {
			t.Fatal(err)
		}
		if ref.ResourceVersion != "" || ref.Name != obj.GetName() || ref.UID == "" || ref.Kind == "" {
			t.Errorf("reference to %s: %+v, want its kind, name and UID, and no resourceVersion", obj.GetName(), ref)
		}
	}
}

// TestNotesFitTheEventsAPI: a note longer than the events.k8s.io API takes
// is cut to 1,024 bytes at a character's start, and says it was cut.
func TestNotesFitTheEventsAPI(t *testing.T) {
	long := strings.Repeat("é", 600) // 1,200 bytes
	got := clip(long)
	if len(got) > maxNote || !utf8.ValidString(got) || !strings.HasSuffix(got, v1alpha1.TruncateMark) {
		t.Errorf("clip: %d bytes, valid UTF-8 %v, ends %q; want at most %d, valid, ending with the mark", len(got), utf8.ValidString(got), got[len(got)-4:], maxNote)
	}
	if short := "evicted"; clip(short) != short {
		t.Errorf("clip(%q) = %q", short, clip(short))
	}
}

// recorded is an event as a test recorder kept it.
type recorded struct {
	regarding, reason, note string
}

// keepingRecorder keeps every event with the kind of object it regards.
type keepingRecorder struct{ events []recorded }

func (k *keepingRecorder) Eventf(regarding, _ runtime.Object, _, reason, _, note string, args ...any) {
	k.events = append(k.events, recorded{regarding: fmt.Sprintf("%T", regarding), reason: reason, note: fmt.Sprintf(note, args...)})
}

// TestTenantTextStaysOnItsPod is the abuse test of the events' notes: what
// a tenant controls (its hook's answer, its pod's blocker detail) reaches
// the event on its own pod, in its own namespace, and never an event on
// the node or the drain, which `kubectl describe node` shows to everyone.
func TestTenantTextStaysOnItsPod(t *testing.T) {
	const forged = "all clear: the node is safe to power off"
	rec := &keepingRecorder{}
	r := &Reconciler{Events: rec, blocked: newReasonGauge(metrics.PodsBlocked)}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "app", UID: "p1"}}
	nd := statusDrain.DeepCopy()
	before := nd.Status.DeepCopy()
	s := &scope{drain: nd, node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "n1"}}, now: statusNow,
		found: facts{cordoned: true, podsLeft: true, podsHeld: true, evicting: &podCounts{remaining: 1, blockers: []podBlocker{{
			Blocker: v1alpha1.Blocker{Pod: "tenant/app", Reason: v1alpha1.BlockerHTTPHook, Holder: "HTTP hook of tenant/app " + forged,
				Detail: "the hook answered InProgress: " + forged, Since: metav1.NewTime(statusNow)},
			pod: pod, hold: corev1.EventTypeNormal}}}}}
	s.setStatus()
	r.reportPods(s)
	r.reportDrain(s, before)
	for _, f := range s.onWritten {
		f()
	}
	r.recordPodEvents(s)
	reasons := map[string]bool{}
	for _, e := range rec.events {
		reasons[e.regarding+" "+e.reason] = true
		if strings.Contains(e.note, forged) && e.regarding != "*v1.Pod" {
			t.Errorf("%s event on a %s quotes the tenant's text: %q", e.reason, e.regarding, e.note)
		}
	}
	for _, want := range []string{"*v1.Node DrainStarted", "*v1.Node DrainBlocked", "*v1alpha1.NodeDrain DrainBlocked", "*v1.Pod EvictionHeld"} {
		if !reasons[want] {
			t.Errorf("no %s event; got %v", want, rec.events)
		}
	}
}
