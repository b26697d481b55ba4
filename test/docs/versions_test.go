package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
)

// supportedRange is how the docs state the Kubernetes versions vacate
// supports: the oldest and the newest minor the dev cluster runs, which
// `make test-compat` proves.
func supportedRange() string {
	newest := devcluster.ControlPlanes[len(devcluster.ControlPlanes)-1]
	return "Kubernetes " + devcluster.OldestKubernetesMinor() + " to " + newest.Minor()
}

// TestSupportedKubernetesVersionsAgree: the chart's kubeVersion, README and
// docs/install.md state the same range, the one the dev cluster can run,
// and no doc says vacate claims less.
func TestSupportedKubernetesVersionsAgree(t *testing.T) {
	chart, err := os.ReadFile(filepath.Join(root, "charts/vacate/Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^kubeVersion:\s*"?([^"\n]*)"?\s*$`).FindSubmatch(chart)
	if want := ">=" + devcluster.OldestKubernetesMinor() + ".0-0"; m == nil || string(m[1]) != want {
		t.Errorf("charts/vacate/Chart.yaml: kubeVersion %q, want %q (the oldest minor make test-compat proves)", m, want)
	}
	for _, doc := range []string{"README.md", "docs/install.md", "docs/dev/compat.md"} {
		b, err := os.ReadFile(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		text := strings.Join(strings.Fields(string(b)), " ")
		if !strings.Contains(text, supportedRange()) {
			t.Errorf("%s does not state the supported range %q", doc, supportedRange())
		}
		for _, stale := range []string{"older versions are not tested", "are not claimed"} {
			if strings.Contains(text, stale) {
				t.Errorf("%s still says %q", doc, stale)
			}
		}
	}
}
