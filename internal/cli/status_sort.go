package cli

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"time"

	"k8s.io/client-go/util/jsonpath"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// sortFields are the fields --sort-by completes to, those people sort
// drains by; any other JSONPath into the NodeDrain works too.
var sortFields = []string{".metadata.name", ".metadata.creationTimestamp", ".status.phase", ".status.evicted", ".status.blocked",
	".status.startTime", ".status.completionTime", ".status.queuePosition", ".spec.mode"}

// drainSorter sorts drains by --sort-by, a JSONPath expression into the
// NodeDrain, as kubectl get --sort-by does: numbers by value, times
// (RFC 3339 strings) by time, other values as text; drains without the
// field come first, and ties keep the order by name. A field no drain has
// is an error, as in kubectl (a typo would otherwise leave the order as
// it was).
type drainSorter struct {
	expr string
	path *jsonpath.JSONPath
}

// newDrainSorter parses --sort-by; nil for "" (the order by name).
func newDrainSorter(expr string) (*drainSorter, error) {
	if expr == "" {
		return nil, nil
	}
	jp := jsonpath.New("sort-by").AllowMissingKeys(true)
	if err := jp.Parse(relaxedJSONPath(expr)); err != nil {
		return nil, argsError{fmt.Sprintf("--sort-by %q is no JSONPath expression (%v); for example --sort-by=.metadata.creationTimestamp or --sort-by='{.status.evicted}'", expr, err)}
	}
	return &drainSorter{expr: expr, path: jp}, nil
}

// sort orders drains in place; an expression that selects more than one
// value of a drain, or a list or an object, is an error.
func (s *drainSorter) sort(drains []v1alpha1.NodeDrain) error {
	if s == nil {
		return nil
	}
	keys := make([]any, len(drains))
	found := false
	for i := range drains {
		k, err := s.key(&drains[i])
		if err != nil {
			return err
		}
		keys[i], found = k, found || k != nil
	}
	if len(drains) > 0 && !found { // a typo, most likely: kubectl's error too
		return argsError{fmt.Sprintf("--sort-by %q: no NodeDrain has this field; see 'kubectl explain nodedrains --recursive'", s.expr)}
	}
	idx := make([]int, len(drains))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return less(keys[idx[a]], keys[idx[b]]) })
	sorted := make([]v1alpha1.NodeDrain, len(drains))
	for i, j := range idx {
		sorted[i] = drains[j]
	}
	copy(drains, sorted)
	return nil
}

// key is the drain's value at the expression: nil when it has none.
func (s *drainSorter) key(nd *v1alpha1.NodeDrain) (any, error) {
	b, err := json.Marshal(nd)
	if err != nil {
		return nil, err
	}
	var data any
	if err := json.Unmarshal(b, &data); err != nil {
		return nil, err
	}
	results, err := s.path.FindResults(data)
	if err != nil {
		return nil, argsError{fmt.Sprintf("--sort-by %q: %v", s.expr, err)}
	}
	var values []reflect.Value
	for _, r := range results {
		values = append(values, r...)
	}
	switch {
	case len(values) == 0:
		return nil, nil
	case len(values) > 1:
		return nil, argsError{fmt.Sprintf("--sort-by %q selects %d values of NodeDrain %s, want one", s.expr, len(values), nd.Name)}
	}
	v := values[0].Interface()
	switch v.(type) {
	case map[string]any, []any:
		return nil, argsError{fmt.Sprintf("--sort-by %q selects an object or a list of NodeDrain %s, want a number, a time or a string", s.expr, nd.Name)}
	}
	return v, nil
}

// less orders two values as kubectl's sort: missing first, then numbers,
// then times, then text.
func less(a, b any) bool {
	ra, rb := rank(a), rank(b)
	if ra != rb {
		return ra < rb
	}
	switch ra {
	case rankNumber:
		return a.(float64) < b.(float64)
	case rankTime:
		return asTime(a).Before(asTime(b))
	case rankText:
		return fmt.Sprint(a) < fmt.Sprint(b)
	}
	return false
}

const (
	rankMissing = iota
	rankNumber
	rankTime
	rankText
)

func rank(v any) int {
	switch x := v.(type) {
	case nil:
		return rankMissing
	case float64:
		return rankNumber
	case string:
		if _, err := time.Parse(time.RFC3339, x); err == nil {
			return rankTime
		}
	}
	return rankText
}

func asTime(v any) time.Time {
	t, _ := time.Parse(time.RFC3339, v.(string))
	return t
}
