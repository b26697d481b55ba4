package nodedrain

import (
	"errors"
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
