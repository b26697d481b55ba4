package v1alpha1

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// TestCordonedBy: CordonedBy reads back what CordonedByValue writes, and
// says a value not in that format (absent, empty, without a UID) names no
// drain by name and UID.
func TestCordonedBy(t *testing.T) {
	written := CordonedByValue(&NodeDrain{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1"}})
	cases := []struct {
		name  string
		value *string // nil: no annotation
		drain string
		uid   types.UID
		ok    bool
	}{
		{name: "absent"},
		{name: "empty", value: ptr.To("")},
		{name: "malformed: no UID (by hand, or an old version)", value: ptr.To("n1"), drain: "n1"},
		{name: "a UID without a name", value: ptr.To("/u1"), uid: "u1", ok: true},
		{name: "as vacate writes it", value: &written, drain: "n1", uid: "u1", ok: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
			if tc.value != nil {
				node.Annotations = map[string]string{AnnotationCordonedBy: *tc.value}
			}
			drain, uid, ok := CordonedBy(node)
			if drain != tc.drain || uid != tc.uid || ok != tc.ok {
				t.Errorf("CordonedBy() = %q, %q, %t; want %q, %q, %t", drain, uid, ok, tc.drain, tc.uid, tc.ok)
			}
		})
	}
}
