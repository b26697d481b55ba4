package testenv

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/operator"
)

// Objects decodes a multi-document YAML stream (what 'vacate manifests' or
// a chart prints) into objects, leaving out documents of comments only.
func Objects(t testing.TB, text string) []*unstructured.Unstructured {
	t.Helper()
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(text)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		obj := &unstructured.Unstructured{}
		if err := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(doc), 4096).Decode(&obj.Object); err != nil {
			t.Fatalf("decoding %s: %v", doc, err)
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// ClientAs is a client of vacate's kinds and Kubernetes' own that
// authenticates as user (the cluster admin impersonating them).
func ClientAs(t testing.TB, c *devcluster.Cluster, user string) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	scheme, err := operator.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}
