package release

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/registry"
)

func TestNotes(t *testing.T) {
	changelog := []byte("# Changelog\n\n## Unreleased\n\n- soon\n\n## v0.2.0 - 2026-12-01\n\n- surge drains\n- `vacate version`\n\n## [v0.1.0]\n\nThe first.\n\n## v0.0.9\n\n")
	for _, c := range []struct{ version, want, err string }{
		{"v0.2.0", "- surge drains\n- `vacate version`\n", ""},
		{"v0.1.0", "The first.\n", ""},
		{"v0.3.0", "", `CHANGELOG.md has no section "## v0.3.0"`},
		{"v0.0.9", "", `the section "## v0.0.9" of CHANGELOG.md is empty`},
		{"v0.2", "", `no section "## v0.2"`},
	} {
		got, err := Notes(changelog, c.version)
		if got != c.want || (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("Notes(%s) = %q, %v; want %q, %q", c.version, got, err, c.want, c.err)
		}
	}
}

// TestRealChangelogHasAnEntryPerRelease: the repository's CHANGELOG.md
// parses, and has the first release's notes.
func TestRealChangelogHasAnEntryPerRelease(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", Changelog))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Notes(b, "v0.1.0"); err != nil {
		t.Error(err)
	}
}

func TestOptionsAreChecked(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Version: "0.2.0", Registry: "ghcr.io/acme"}, `VERSION "0.2.0" is not a release version`},
		{Options{Version: "v0.2", Registry: "ghcr.io/acme"}, `VERSION "v0.2" is not`},
		{Options{Version: "v0.2.0"}, "REGISTRY is not set"},
		{Options{Version: "v0.2.0", Registry: "https://ghcr.io/acme"}, `REGISTRY "https://ghcr.io/acme" is not a registry`},
		{Options{Version: "v0.2.0", Registry: "ghcr.io/Acme"}, `REGISTRY "ghcr.io/Acme" is not`},
		{Options{Version: "v0.2.0", Registry: "ghcr.io/acme"}, "COSIGN_KEY is not set"},
		{Options{Version: "v0.2.0", Registry: "ghcr.io/acme", Key: "cosign.key", Unsigned: true}, "COSIGN_KEY and UNSIGNED=1 are both set"},
	} {
		err := c.o.validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.o, err, c.want)
		}
	}
	for _, ok := range []Options{
		{Version: "v0.2.0-rc.1", Registry: "127.0.0.1:5000/vacate/", Key: "cosign.key"},
		{Version: "v0.2.0-rc.1", Registry: "127.0.0.1:5000/vacate/", Unsigned: true},
	} {
		if err := ok.validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}

// TestChartIsPackagedAndPushed packages the real chart as a release does
// and pushes it with Helm's client to a registry on loopback; pulled back,
// it is the release's version and names the release's images.
func TestChartIsPackagedAndPushed(t *testing.T) {
	reg := httptest.NewServer(ggcrregistry.New())
	t.Cleanup(reg.Close)
	host := strings.TrimPrefix(reg.URL, "http://")
	created := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	path, err := PackageChart(filepath.Join("..", "..", "..", ChartDir), t.TempDir(), "v1.2.3", host+"/acme", digests(pushed), created)
	if err != nil {
		t.Fatal(err)
	}
	again, err := PackageChart(filepath.Join("..", "..", "..", ChartDir), t.TempDir(), "v1.2.3", host+"/acme", digests(pushed), created)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(path)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("two packagings of the same chart differ")
	}
	r, err := name.NewRegistry(host)
	if err != nil {
		t.Fatal(err)
	}
	if !PlainHTTP(r) {
		t.Fatal("a plain HTTP registry on loopback: PlainHTTP says HTTPS")
	}
	pushed, err := PushChart(path, host+"/acme", "v1.2.3", created, true)
	if err != nil {
		t.Fatal(err)
	}
	if pushed.Ref != "oci://"+host+"/acme/charts/vacate" || pushed.Version != "1.2.3" || !strings.HasPrefix(pushed.Digest, "sha256:") {
		t.Errorf("pushed %+v", pushed)
	}
	c, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	pulled, err := c.Pull(strings.TrimPrefix(pushed.Ref, "oci://") + ":1.2.3")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "vacate.tgz")
	if err := os.WriteFile(out, pulled.Chart.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	ch, err := loader.LoadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != "1.2.3" || ch.Metadata.AppVersion != "v1.2.3" {
		t.Errorf("the pulled chart is version %s, appVersion %s", ch.Metadata.Version, ch.Metadata.AppVersion)
	}
	image, _ := ch.Values["image"].(map[string]any)
	agent, _ := ch.Values["agent"].(map[string]any)
	agentImage, _ := agent["image"].(map[string]any)
	if image["repository"] != host+"/acme/vacate-controller" || agentImage["repository"] != host+"/acme/vacate-agent" {
		t.Errorf("the pulled chart's images: %v and %v", image["repository"], agentImage["repository"])
	}
}
