package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// createRole is `kubectl create clusterrole` or `kubectl create role` (not
// ...rolebinding), which refuses or warns about verbs kubectl does not know
// (vacate's use on drainpolicies, force, decommission, report, the
// overrides): `error: can not perform 'use' on 'drainpolicies' in group
// 'vacate.dev'`.
var createRole = regexp.MustCompile(`kubectl create (cluster)?role [^\n]*(\\\n[^\n]*)*vacate\.dev`)

// TestNoGrantWithKubectlCreateRole (issue 44): no document, manifest
// comment or help text tells an admin to grant vacate's verbs with kubectl
// create clusterrole; they apply a ClusterRole manifest, which
// test/install's TestGrantCommandsOfTheDocs runs. CHANGELOG.md is history
// and is not read.
func TestNoGrantWithKubectlCreateRole(t *testing.T) {
	var files []string
	for _, dir := range []string{"docs", "config", "charts", "internal", "cmd", "examples"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && (strings.HasSuffix(path, ".md") || strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".go")) {
				files = append(files, path)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	files = append(files, filepath.Join(root, "README.md"))
	if len(files) < 100 {
		t.Fatalf("read %d files", len(files))
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range createRole.FindAll(b, -1) {
			t.Errorf("%s: %q: kubectl refuses vacate's verbs; apply a ClusterRole manifest instead (docs/cli.md, Permissions)", f, m)
		}
	}
}
