package release

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestManifestRenders: the krew manifest template renders into a Plugin with
// one platform per archive, each with its selector, URI, sum and binary.
func TestManifestRenders(t *testing.T) {
	m := KrewManifest{Version: "v1.2.3", Platforms: []Platform{
		{OS: "linux", Arch: "amd64", URI: "https://example/v1.2.3/a.tar.gz", SHA256: strings.Repeat("a", 64)},
		{OS: "darwin", Arch: "arm64", URI: "https://example/v1.2.3/b.tar.gz", SHA256: strings.Repeat("b", 64)},
	}}
	var buf bytes.Buffer
	if err := RenderKrew(&buf, "../../../config/plugin/vacate.yaml", m); err != nil {
		t.Fatal(err)
	}
	var plugin struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct{ Name string }
		Spec       struct {
			Version          string
			ShortDescription string `json:"shortDescription"`
			Description      string
			Homepage         string
			Platforms        []struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				}
				URI    string
				SHA256 string `json:"sha256"`
				Bin    string
				Files  []struct{ From, To string }
			}
		}
	}
	if err := yaml.UnmarshalStrict(buf.Bytes(), &plugin); err != nil {
		t.Fatalf("rendered manifest is not a plugin: %v\n%s", err, buf.String())
	}
	if plugin.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || plugin.Kind != "Plugin" || plugin.Metadata.Name != "vacate" ||
		plugin.Spec.Version != "v1.2.3" || plugin.Spec.ShortDescription == "" || len(plugin.Spec.Platforms) != 2 {
		t.Fatalf("plugin: %+v", plugin)
	}
	sum := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, p := range plugin.Spec.Platforms {
		want := m.Platforms[i]
		if p.Selector.MatchLabels["os"] != want.OS || p.Selector.MatchLabels["arch"] != want.Arch || p.URI != want.URI ||
			!sum.MatchString(p.SHA256) || p.Bin != "kubectl-vacate" || len(p.Files) != 3 {
			t.Errorf("platform %d: %+v, want %+v", i, p, want)
		}
	}
}
