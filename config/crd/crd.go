// Package crd embeds vacate's generated CustomResourceDefinitions
// (bases/*.yaml, written by `make generate`), so the controller, the demo and
// the tests install exactly what `kubectl apply -f config/crd/bases` would.
package crd

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"sort"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

//go:embed bases/*.yaml
var bases embed.FS

// YAML returns the CRDs as one multi-document YAML stream, for kubectl apply.
func YAML() ([]byte, error) {
	files, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing embedded CRDs: %w", err)
	}
	sort.Strings(files)
	var out []byte
	for _, f := range files {
		b, err := bases.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		if !bytes.HasPrefix(b, []byte("---")) {
			out = append(out, "---\n"...)
		}
		out = append(out, b...)
	}
	return out, nil
}

// CRDs returns the CustomResourceDefinitions, sorted by name.
func CRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := fs.Glob(bases, "bases/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing embedded CRDs: %w", err)
	}
	sort.Strings(files)
	out := make([]*apiextensionsv1.CustomResourceDefinition, 0, len(files))
	for _, f := range files {
		b, err := bases.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.UnmarshalStrict(b, crd); err != nil {
			return nil, fmt.Errorf("decoding %s: %w", f, err)
		}
		out = append(out, crd)
	}
	return out, nil
}
