package release

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// pushed are a release's images as Run records them.
var pushed = []PushedImage{
	{Name: "vacate-controller", Ref: "127.0.0.1:5000/acme/vacate-controller:v1.2.3", Digest: "sha256:" + strings.Repeat("1", 64)},
	{Name: "vacate-agent", Ref: "127.0.0.1:5000/acme/vacate-agent:v1.2.3", Digest: "sha256:" + strings.Repeat("2", 64)},
	{Name: "vacate-hook", Ref: "127.0.0.1:5000/acme/vacate-hook:v1.2.3", Digest: "sha256:" + strings.Repeat("3", 64)},
}

// TestReleasedManifestsPinDigests: install.yaml and agent.yaml name each
// of vacate's images by the digest that was pushed, never by a tag.
func TestReleasedManifestsPinDigests(t *testing.T) {
	out := t.TempDir()
	if err := writeManifests(out, pushed); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]string{"install.yaml": pushed[0].Pinned(), "agent.yaml": pushed[1].Pinned()} {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		refs := imageLine.FindAllStringSubmatch(string(b), -1)
		if len(refs) == 0 {
			t.Errorf("%s names no image", f)
		}
		for _, m := range refs {
			if m[1] != want {
				t.Errorf("%s names the image %s, want %s", f, m[1], want)
			}
		}
	}
}

// TestReleasedRecipesPinDigests: the release writes each recipe of
// examples/ (the real ones) with vacate-hook named by the digest pushed,
// and reports the images that are not vacate's.
func TestReleasedRecipesPinDigests(t *testing.T) {
	out := t.TempDir()
	files, unpinned, err := writeRecipes(filepath.Join("..", "..", ".."), out, pushed)
	if err != nil {
		t.Fatal(err)
	}
	recipes, _ := filepath.Glob(filepath.Join("..", "..", "..", RecipesGlob))
	if len(files) != len(recipes) || len(recipes) < 3 {
		t.Fatalf("wrote %v for the recipes %v", files, recipes)
	}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "ghcr.io/vacate-dev/") {
			t.Errorf("%s still names ghcr.io/vacate-dev/", f)
		}
		hooks := 0
		for _, m := range imageLine.FindAllStringSubmatch(string(b), -1) {
			switch {
			case m[1] == pushed[2].Pinned():
				hooks++
			case strings.Contains(m[1], "vacate"):
				t.Errorf("%s names %s, want vacate's images as pushed (%s)", f, m[1], pushed[2].Pinned())
			case !slices.Contains(unpinned, m[1]):
				t.Errorf("%s names %s, which is not reported as unpinned (%v)", f, m[1], unpinned)
			}
		}
		if hooks == 0 {
			t.Errorf("%s names no vacate-hook image by digest", f)
		}
	}
}

// TestPushedImagePinned: an image by the digest of its index.
func TestPushedImagePinned(t *testing.T) {
	for ref, want := range map[string]string{
		"127.0.0.1:5000/acme/vacate-hook:v1.2.3": "127.0.0.1:5000/acme/vacate-hook@sha256:3",
		"ghcr.io/vacate-dev/vacate-hook:v1.2.3":  "ghcr.io/vacate-dev/vacate-hook@sha256:3",
		"localhost/vacate-hook":                  "localhost/vacate-hook@sha256:3",
	} {
		if got := (PushedImage{Ref: ref, Digest: "sha256:3"}).Pinned(); got != want {
			t.Errorf("%s pinned: %s, want %s", ref, got, want)
		}
	}
}

// TestReleasedChartPinsDigests: the released chart's default values pin the
// controller's and the agent's images by digest.
func TestReleasedChartPinsDigests(t *testing.T) {
	path, err := PackageChart(filepath.Join("..", "..", "..", ChartDir), t.TempDir(), "v1.2.3", "127.0.0.1:5000/acme", digests(pushed), time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := ch.Values["agent"].(map[string]any)
	for name, img := range map[string]any{"vacate-controller": ch.Values["image"], "vacate-agent": agent["image"]} {
		m, _ := img.(map[string]any)
		if d, _ := m["digest"].(string); d != digests(pushed)[name] {
			t.Errorf("the released chart's %s image: digest %q, want the pushed %s", name, d, digests(pushed)[name])
		}
		if r, _ := m["repository"].(string); r != "127.0.0.1:5000/acme/"+name {
			t.Errorf("the released chart's %s image: repository %q", name, r)
		}
	}
}
