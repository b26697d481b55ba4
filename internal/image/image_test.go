package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/vacate-dev/vacate/internal/image"
)

// helpFlag is a flag each program's --help lists: proof the entrypoint is
// the program, not merely a file of its name.
var helpFlag = map[string]string{"vacate-controller": "leader-elect", "vacate-agent": "on-sigterm"}

// TestImages builds vacate's images twice, as `make images` does, and reads
// them back with go-containerregistry: both architectures are in each index,
// the images run as a non-root user, the entrypoint is the program (run for
// this machine's architecture), the docker tarballs hold the same images,
// the SBOMs list the modules, and the second build has the same digests.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs for two architectures")
	}
	ctx := context.Background()
	created := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	build := func(out string) map[string]*image.Written {
		t.Helper()
		opts := image.Options{ModuleDir: moduleRoot(t), WorkDir: t.TempDir(), Version: "v0.0.0-test", Revision: "test",
			Created: created, Source: "https://github.com/vacate-dev/vacate"}
		written := map[string]*image.Written{}
		for _, prog := range image.Programs {
			b, err := image.Build(ctx, prog, opts)
			if err != nil {
				t.Fatal(err)
			}
			w, err := image.Write(b, out, "registry.example/vacate/"+prog.Name+":v0.0.0-test")
			if err != nil {
				t.Fatal(err)
			}
			written[prog.Name] = w
		}
		return written
	}
	first := build(t.TempDir())
	for _, prog := range image.Programs {
		t.Run(prog.Name, func(t *testing.T) { checkImage(t, prog, first[prog.Name]) })
	}

	second := build(t.TempDir())
	for _, prog := range image.Programs {
		if first[prog.Name].Digest != second[prog.Name].Digest {
			t.Errorf("%s: two builds of the same tree gave digests %s and %s", prog.Name, first[prog.Name].Digest, second[prog.Name].Digest)
		}
		for p, f := range first[prog.Name].SBOMs {
			a, _ := os.ReadFile(f)
			b, _ := os.ReadFile(second[prog.Name].SBOMs[p])
			if !bytes.Equal(a, b) {
				t.Errorf("%s %s: the two builds' SBOMs differ", prog.Name, p)
			}
		}
	}
}

func checkImage(t *testing.T, prog image.Program, w *image.Written) {
	path, err := layout.FromPath(w.Layout)
	if err != nil {
		t.Fatal(err)
	}
	outer, err := path.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	om, err := outer.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(om.Manifests) != 1 || om.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != w.Ref || om.Manifests[0].Digest != w.Digest {
		t.Fatalf("layout index.json %+v, want the one index %s named %s", om.Manifests, w.Digest, w.Ref)
	}
	idx, err := outer.ImageIndex(w.Digest)
	if err != nil {
		t.Fatal(err)
	}
	// What crane validate checks: every digest, size and diff ID matches
	// its blob.
	if err := validate.Index(idx); err != nil {
		t.Errorf("%s: the index does not validate: %v", prog.Name, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var arches []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("manifest %s has no platform", d.Digest)
		}
		arches = append(arches, d.Platform.OS+"/"+d.Platform.Architecture)
		img, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		bin := checkPlatformImage(t, prog, img, *d.Platform)
		if d.Platform.Architecture == runtime.GOARCH && d.Platform.OS == runtime.GOOS {
			runEntrypoint(t, prog, bin)
		}
		checkTarball(t, w, *d.Platform, img)
		checkSBOM(t, w.SBOMs[d.Platform.String()])
	}
	if strings.Join(arches, ",") != "linux/amd64,linux/arm64" {
		t.Errorf("%s: index platforms %v, want linux/amd64 and linux/arm64", prog.Name, arches)
	}
}

// checkPlatformImage checks one image's configuration and files and returns
// its entrypoint's contents.
func checkPlatformImage(t *testing.T, prog image.Program, img v1.Image, p v1.Platform) []byte {
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != p.OS || cf.Architecture != p.Architecture {
		t.Errorf("%s %s: config says %s/%s", prog.Name, p, cf.OS, cf.Architecture)
	}
	uid, gid, ok := strings.Cut(cf.Config.User, ":")
	if n, err := strconv.Atoi(uid); !ok || err != nil || n == 0 || gid == "0" {
		t.Errorf("%s %s: user %q, want a numeric non-root uid:gid (Kubernetes' runAsNonRoot checks the number)", prog.Name, p, cf.Config.User)
	}
	entry := image.BinDir + "/" + prog.Name
	if len(cf.Config.Entrypoint) != 1 || cf.Config.Entrypoint[0] != entry {
		t.Errorf("%s %s: entrypoint %v, want [%s]", prog.Name, p, cf.Config.Entrypoint, entry)
	}
	files := layerFiles(t, img)
	bin, ok := files[strings.TrimPrefix(entry, "/")]
	if !ok || bin.mode&0o111 == 0 {
		t.Fatalf("%s %s: no executable %s in the image (files: %v)", prog.Name, p, entry, keys(files))
	}
	if passwd := string(files["etc/passwd"].data); !strings.Contains(passwd, ":"+uid+":"+gid+":") {
		t.Errorf("%s %s: /etc/passwd has no user %s:%s:\n%s", prog.Name, p, uid, gid, passwd)
	}
	if tmp, ok := files["tmp"]; !ok || tmp.mode&0o1777 != 0o1777 {
		t.Errorf("%s %s: /tmp missing or not writable by all (mode %o)", prog.Name, p, tmp.mode)
	}
	return bin.data
}

// runEntrypoint runs the image's binary (this machine's architecture) with
// --help.
func runEntrypoint(t *testing.T, prog image.Program, bin []byte) {
	f := filepath.Join(t.TempDir(), prog.Name)
	if err := os.WriteFile(f, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(f, "--help").CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("running the image's %s: %v", prog.Name, err)
	}
	if !strings.Contains(string(out), helpFlag[prog.Name]) {
		t.Errorf("the image's %s --help does not mention %s:\n%s", prog.Name, helpFlag[prog.Name], out)
	}
}

// checkTarball loads the docker tarball of platform p and compares its image
// with the layout's: the same configuration (docker's image ID) and layers.
// (A docker archive keeps no manifest, so the manifest digest differs.)
func checkTarball(t *testing.T, w *image.Written, p v1.Platform, want v1.Image) {
	tag, err := name.NewTag(w.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(w.Tarballs[p.String()], &tag)
	if err != nil {
		t.Fatalf("loading %s: %v", w.Tarballs[p.String()], err)
	}
	if err := validate.Image(img); err != nil {
		t.Errorf("%s does not validate: %v", w.Tarballs[p.String()], err)
	}
	for _, id := range []func(v1.Image) (v1.Hash, error){v1.Image.ConfigName, topLayer} {
		got, err := id(img)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := id(want)
		if err != nil {
			t.Fatal(err)
		}
		if got != exp {
			t.Errorf("%s holds %s, the layout %s", w.Tarballs[p.String()], got, exp)
		}
	}
}

// topLayer is the image's one layer's uncompressed digest.
func topLayer(img v1.Image) (v1.Hash, error) {
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		return v1.Hash{}, fmt.Errorf("%d layers (%v), want 1", len(layers), err)
	}
	return layers[0].DiffID()
}

func checkSBOM(t *testing.T, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion string `json:"spdxVersion"`
		Packages    []struct {
			Name string `json:"name"`
		} `json:"packages"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	names := map[string]bool{}
	for _, p := range doc.Packages {
		names[p.Name] = true
	}
	if doc.SPDXVersion != "SPDX-2.3" || !names["k8s.io/client-go"] || !names["github.com/vacate-dev/vacate"] {
		t.Errorf("%s: SPDX %q with %d packages, want SPDX-2.3 naming vacate and k8s.io/client-go", path, doc.SPDXVersion, len(doc.Packages))
	}
}

type file struct {
	mode int64
	data []byte
}

func layerFiles(t *testing.T, img v1.Image) map[string]file {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[strings.TrimSuffix(h.Name, "/")] = file{mode: h.Mode, data: data}
		}
		rc.Close()
	}
	return files
}

func keys(m map[string]file) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func moduleRoot(t *testing.T) string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
