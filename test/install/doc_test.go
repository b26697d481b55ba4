package install

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/vacate-dev/vacate/internal/dev/devcluster"
	"github.com/vacate-dev/vacate/internal/dev/gobuild"
	"github.com/vacate-dev/vacate/internal/dev/image"
	"github.com/vacate-dev/vacate/internal/dev/testenv"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// shBlock is a fenced ```sh block of a Markdown file: the commands a reader
// runs. Blocks fenced otherwise (```text, ```yaml) are not run.
var shBlock = regexp.MustCompile("(?ms)^```sh\n(.*?)^```$")

// registryLine is the one line a reader edits: where the images go.
var registryLine = regexp.MustCompile(`(?m)^export REGISTRY=.*$`)

// crStorageReady waits, in the document's shell, until every vacate CRD's
// resources list (at most a minute), printing nothing.
const crStorageReady = `for r in nodedrains drainpolicies evacuations evacuationproviders; do
  for i in $(seq 120); do kubectl get "$r.vacate.dev" -A >/dev/null 2>&1 && break; sleep 0.5; done
done
`

// TestInstallDocCommands runs every ```sh block of docs/install.md, in
// order, as a reader would, in a copy of the checkout, against the dev
// cluster (with two simulated nodes, so the installed workloads run),
// with REGISTRY set to a registry the test serves on loopback (and the
// images built for this machine's platform only), and the helm, cosign
// and kubectl binaries built from their pinned modules. Each block must
// succeed: the document makes a signed release and verifies it with
// cosign before installing it. Then every image the release names is
// pinned to the digest pushed, a changed checksums.txt or another key
// fails cosign's verification, and every installation method has been
// undone, so nothing of vacate is left in the cluster.
func TestInstallDocCommands(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Fatal("docs/install.md reads release.json with jq: install it (apt-get install jq)")
	}
	c, cl := startCluster(t)
	testenv.Nodes(t, c, devcluster.NodeSet{Prefix: "doc", Count: 2})
	reg := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	regHost := strings.TrimPrefix(reg.URL, "http://")

	doc, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(registryLine.FindAll(doc, -1)); n != 1 {
		t.Fatalf("docs/install.md sets REGISTRY %d times, want once", n)
	}
	blocks := shBlock.FindAllSubmatch(doc, -1)
	if len(blocks) < 5 {
		t.Fatalf("docs/install.md has %d sh blocks", len(blocks))
	}

	work := copyCheckout(t)
	home := t.TempDir()
	tools := buildTools(t, regHost)
	env := append(os.Environ(),
		"KUBECONFIG="+c.Kubeconfig,
		// A home of its own (helm's and kubectl's settings), with Go's
		// caches where they were.
		"HOME="+home,
		"GOCACHE="+goEnv(t, "GOCACHE"),
		"GOMODCACHE="+goEnv(t, "GOMODCACHE"),
		"GOPATH="+goEnv(t, "GOPATH"),
		"PATH="+tools+string(os.PathListSeparator)+os.Getenv("PATH"),
		// The copy is no git checkout: the images are dated by this.
		"SOURCE_DATE_EPOCH=1790000000",
		// The image step for this machine's platform only: both platforms
		// are internal/dev/image's test, and each costs two links here.
		"IMAGE_PLATFORMS=linux/"+runtime.GOARCH,
		// The CLI's archive for this machine only: the document installs
		// it, and the other three are links of the same program.
		"CLI_PLATFORMS=linux/"+runtime.GOARCH,
		"GOFLAGS=",
	)
	// The blocks run in one shell, in order, as in one terminal: a block
	// sees what the blocks before it exported. A marker before each block
	// tells which one a failure came from.
	var script strings.Builder
	for i, b := range blocks {
		text := registryLine.ReplaceAllString(string(b[1]), "export REGISTRY="+regHost+"/vacate")
		if strings.Contains(text, "kubectl delete -k") {
			// Not the document's: a person deletes vacate minutes after
			// installing it, this script seconds after. A CRD deleted before
			// the API server lists its resources from its watch cache can stay
			// Terminating for minutes (waitForCRStorage).
			script.WriteString(crStorageReady)
		}
		fmt.Fprintf(&script, "printf '\\n%s%d at %%ss\\n' \"$SECONDS\"\n%s", blockMarker, i+1, text)
	}
	outputs, err := runBash(work, env, script.String())
	for i, out := range outputs {
		t.Logf("docs/install.md block %d (%s into the document):\n%s\noutput:\n%s", i+1, out.at, blocks[i][1], out.text)
	}
	if err != nil {
		t.Fatalf("docs/install.md block %d failed: %v", len(outputs), err)
	}
	if len(outputs) != len(blocks) {
		t.Fatalf("ran %d of the %d blocks", len(outputs), len(blocks))
	}

	rel := filepath.Join(work, "dist", "release", "v0.1.0")
	m := readRelease(t, rel)
	pinned := m.pinned()
	// Helm's chart and install.yaml, both from the release, run its image,
	// by digest.
	shown := 0
	for i, out := range outputs {
		if strings.Contains(string(blocks[i][1]), imageQuery) {
			shown++
			if want := pinned["vacate-controller"]; want == "" || !slices.Contains(strings.Split(out.text, "\n"), want) {
				t.Errorf("docs/install.md block %d: the controller runs %q, want the release's %s", i+1, out.text, want)
			}
		}
	}
	if shown != 2 {
		t.Errorf("%d blocks show the controller's image, want 2 (Helm and install.yaml)", shown)
	}

	checkPinned(t, rel, m, regHost+"/vacate")
	checkVerificationFails(t, tools, rel, m)

	// The images the document pushed are image indexes of the platform
	// built, each platform's image with its SBOM as a referrer.
	for _, img := range []string{"vacate-controller", "vacate-agent", "vacate-hook"} {
		ref, err := name.ParseReference(regHost + "/vacate/" + img + ":v0.1.0")
		if err != nil {
			t.Fatal(err)
		}
		idx, err := remote.Index(ref)
		if err != nil {
			t.Errorf("%s in the registry: %v", ref, err)
			continue
		}
		m, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		var platforms []string
		for _, d := range m.Manifests {
			if d.Platform != nil {
				platforms = append(platforms, d.Platform.String())
			}
			checkSBOMReferrer(t, ref.Context().Digest(d.Digest.String()))
		}
		if strings.Join(platforms, ",") != "linux/"+runtime.GOARCH {
			t.Errorf("%s was pushed with platforms %v, want linux/%s", ref, platforms, runtime.GOARCH)
		}
	}

	// Everything was uninstalled by the document's own commands.
	for _, name := range []string{"vacate-controller", "vacate-user", "vacate-agent", "vacate-controller-force-delete"} {
		if err := cl.Get(context.Background(), client.ObjectKey{Name: name}, &rbacv1.ClusterRole{}); client.IgnoreNotFound(err) != nil || err == nil {
			t.Errorf("after the document, ClusterRole %s: %v (want it gone)", name, err)
		}
	}
	testutil.Eventually(t, patience, "vacate's CRDs deleted by the document", func() error {
		crds, err := rbacCRDNames(context.Background(), cl)
		if err == nil && len(crds) > 0 {
			err = fmt.Errorf("still there: %v", crds)
		}
		return err
	})
}

// checkSBOMReferrer checks that an SPDX document refers to the image.
func checkSBOMReferrer(t *testing.T, img name.Digest) {
	t.Helper()
	refs, err := remote.Referrers(img)
	if err != nil {
		t.Errorf("the referrers of %s: %v", img, err)
		return
	}
	m, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.ArtifactType != image.SBOMArtifactType {
			continue
		}
		art, err := remote.Image(img.Context().Digest(d.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		layers, err := art.Layers()
		if err != nil || len(layers) != 1 {
			t.Fatalf("the SBOM of %s: %d layers, %v", img, len(layers), err)
		}
		rc, err := layers[0].Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			SPDXVersion string `json:"spdxVersion"`
		}
		err = json.NewDecoder(rc).Decode(&doc)
		rc.Close()
		if err != nil || !strings.HasPrefix(doc.SPDXVersion, "SPDX-") {
			t.Errorf("the SBOM of %s is not an SPDX document: %v, %+v", img, err, doc)
		}
		return
	}
	t.Errorf("no SBOM refers to %s: referrers %+v", img, m.Manifests)
}

// imageQuery is the command of the document that shows the controller's
// image.
const imageQuery = "get deployment vacate-controller -o jsonpath='{.spec.template.spec.containers[0].image}"

// blockMarker starts each block's output.
const blockMarker = "__vacate_doc_block_"

// blockOutput is what one block printed, and when it started.
type blockOutput struct{ at, text string }

// runBash runs script with bash -euo pipefail in dir and returns the output
// of each block that started, split at the markers.
func runBash(dir string, env []string, script string) ([]blockOutput, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", script)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	var w io.Writer = &out
	if testing.Verbose() {
		w = io.MultiWriter(&out, os.Stderr) // follow it live with go test -v
	}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	marker := regexp.MustCompile(`(?m)^` + blockMarker + `\d+ at (\d+s)\n`)
	text := out.String()
	var blocks []blockOutput
	locs := marker.FindAllStringSubmatchIndex(text, -1)
	for i, l := range locs {
		end := len(text)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		blocks = append(blocks, blockOutput{at: text[l[2]:l[3]], text: text[l[1]:end]})
	}
	return blocks, err
}

// copyCheckout copies the checkout's files (tracked and untracked, not
// ignored) to a directory of the test's, where the document's commands
// may write (dist/, bin/, deploy/).
func copyCheckout(t *testing.T) string {
	t.Helper()
	root := repoRoot(t)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, f)
		fi, err := os.Lstat(src)
		if err != nil {
			if os.IsNotExist(err) {
				continue // deleted, not yet committed
			}
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, fi.Mode().Perm()|fs.FileMode(0o200)); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// buildTools puts helm and cosign (built from hack/tools, at the versions
// it pins) and the dev cluster's kubectl in a directory for PATH. The
// document's
// registry has TLS; the test's, on loopback, does not, so helm is a script
// that adds --plain-http to the commands that name it (as a person would
// with such a registry), and runs the real one.
func buildTools(t *testing.T, regHost string) string {
	t.Helper()
	dir := t.TempDir()
	// From the go command's cache of executables once built: its version
	// is pinned, so a later run does not link it again.
	helm := filepath.Join(t.TempDir(), "helm")
	if err := gobuild.Build(context.Background(), gobuild.Options{Dir: filepath.Join(repoRoot(t), "hack", "tools")}, "helm.sh/helm/v4/cmd/helm", helm); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf(`#!/usr/bin/env bash
# helm, with --plain-http for the test's registry on loopback (%[1]s)
extra=()
for a in "$@"; do case "$a" in oci://%[1]s/*) extra=(--plain-http);; esac; done
exec %[2]s "$@" "${extra[@]}"
`, regHost, helm)
	if err := os.WriteFile(filepath.Join(dir, "helm"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	// cosign, as helm: linked once per machine (a cold build of its
	// modules costs about 360 CPU-seconds, once), copied after.
	if err := gobuild.Build(context.Background(), gobuild.Options{Dir: filepath.Join(repoRoot(t), "hack", "tools")}, "github.com/sigstore/cosign/v3/cmd/cosign", filepath.Join(dir, "cosign")); err != nil {
		t.Fatal(err)
	}
	bins, err := devcluster.EnsureBinaries(context.Background(), os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bins[devcluster.Kubectl], filepath.Join(dir, "kubectl")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
