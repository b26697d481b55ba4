package image_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
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

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/vacate-dev/vacate/internal/dev/image"
	"github.com/vacate-dev/vacate/internal/dev/testutil"
)

// helpFlag is a flag each program's --help lists: proof the entrypoint is
// the program, not merely a file of its name.
var helpFlag = map[string]string{"vacate-controller": "leader-elect", "vacate-agent": "on-sigterm", "vacate-hook": "--config FILE"}

// TestImages builds vacate's images twice with the program `make images`
// runs (hack/image, built as releases are, so the compression is not run
// under the race detector), and reads them back with go-containerregistry:
// both architectures are in each index, the images run as a non-root user,
// the entrypoint is the program (run for this machine's architecture), the
// docker tarballs hold the same images, the SBOMs list the modules,
// images.json lists it all, and the second build has the same digests. The
// second build's binaries come from the go command's cache (gobuild), so it
// shows that assembling the images is deterministic; that the go command
// gives the same bytes for the same sources and flags in any directory is
// the Go toolchain's promise with -trimpath.
func TestImages(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the programs for two architectures")
	}
	root := moduleRoot(t)
	tool := testutil.BuildProgram(t, "github.com/vacate-dev/vacate/hack/image", filepath.Join(t.TempDir(), "image"))
	build := func() map[string]*image.Written {
		t.Helper()
		out := t.TempDir()
		cmd := exec.Command(tool, "--version", "v0.0.0-test", "--repo", "registry.example/vacate", "--out", out)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1793534400")
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", cmd, err, b)
		}
		written, err := image.ReadIndex(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range image.Programs {
			if written[prog.Name] == nil {
				t.Fatalf("%s does not list %s: %v", image.IndexFile, prog.Name, written)
			}
		}
		return written
	}
	first := build()
	for _, prog := range image.Programs {
		t.Run(prog.Name, func(t *testing.T) { checkImage(t, prog, first[prog.Name]) })
	}

	second := build()
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
	// What crane validate checks: every digest and size matches its blob.
	// Fast leaves out the layers, which layerFiles checks in the one pass
	// that reads them.
	if err := validate.Index(idx, validate.Fast); err != nil {
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
		checkSBOM(t, w.SBOMs[d.Platform.String()], bin)
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
// with the layout's: the same configuration (docker's image ID) and the same
// layer, byte for byte (a docker archive keeps no manifest, so the
// manifest digest differs). The layout's layer was validated (decompressed
// and hashed) by checkImage, so the tarball's needs only its digest: the
// same compressed bytes hold the same tar, whose digest the configuration
// names (decompressing it again under the race detector cost about six
// CPU-seconds).
func checkTarball(t *testing.T, w *image.Written, p v1.Platform, want v1.Image) {
	tag, err := name.NewTag(w.Ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(w.Tarballs[p.String()], &tag)
	if err != nil {
		t.Fatalf("loading %s: %v", w.Tarballs[p.String()], err)
	}
	ids := map[string]func(v1.Image) (v1.Hash, error){
		"configuration": v1.Image.ConfigName,
		"layer (compressed, as the archive holds it)": layerDigest(v1.Layer.Digest),
	}
	for what, id := range ids {
		got, err := id(img)
		if err != nil {
			t.Fatalf("%s: %s: %v", w.Tarballs[p.String()], what, err)
		}
		exp, err := id(want)
		if err != nil {
			t.Fatal(err)
		}
		if got != exp {
			t.Errorf("%s: %s %s, the layout's %s", w.Tarballs[p.String()], what, got, exp)
		}
	}
}

// layerDigest is a digest of the image's one layer.
func layerDigest(of func(v1.Layer) (v1.Hash, error)) func(v1.Image) (v1.Hash, error) {
	return func(img v1.Image) (v1.Hash, error) {
		layers, err := img.Layers()
		if err != nil || len(layers) != 1 {
			return v1.Hash{}, fmt.Errorf("%d layers (%v), want 1", len(layers), err)
		}
		return of(layers[0])
	}
}

// checkSBOM: the SBOM is SPDX 2.3 and lists vacate and every module the
// image's binary was built with (its build information).
func checkSBOM(t *testing.T, path string, bin []byte) {
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
	if doc.SPDXVersion != "SPDX-2.3" || !names["github.com/vacate-dev/vacate"] {
		t.Errorf("%s: SPDX %q with %d packages, want SPDX-2.3 naming vacate", path, doc.SPDXVersion, len(doc.Packages))
	}
	info, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		t.Fatalf("%s: the image's binary has no build information: %v", path, err)
	}
	if len(info.Deps) == 0 {
		t.Errorf("%s: the binary lists no modules", path)
	}
	for _, dep := range info.Deps {
		if !names[dep.Path] {
			t.Errorf("%s does not list %s, which the binary was built with", path, dep.Path)
		}
	}
}

type file struct {
	mode int64
	data []byte
}

// layerFiles reads the image's layers, and checks each as crane validate
// does, in one pass: the compressed blob's digest and size are the
// manifest's, and the uncompressed tar's digest is the configuration's
// diff ID.
func layerFiles(t *testing.T, img v1.Image) map[string]file {
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]file{}
	for _, l := range layers {
		digest, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		diffID, err := l.DiffID()
		if err != nil {
			t.Fatal(err)
		}
		size, err := l.Size()
		if err != nil {
			t.Fatal(err)
		}
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		compressed := sha256.New()
		n := &countingWriter{}
		zr, err := gzip.NewReader(io.TeeReader(rc, io.MultiWriter(compressed, n)))
		if err != nil {
			t.Fatalf("layer %s: %v", digest, err)
		}
		uncompressed := sha256.New()
		tr := tar.NewReader(io.TeeReader(zr, uncompressed))
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
		// The rest of the stream: the tar's end padding, the gzip trailer
		// (which gzip checks against the data).
		if _, err := io.Copy(io.Discard, io.TeeReader(zr, uncompressed)); err != nil {
			t.Fatalf("layer %s: %v", digest, err)
		}
		if _, err := io.Copy(io.Discard, io.TeeReader(rc, io.MultiWriter(compressed, n))); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		if got := "sha256:" + hex.EncodeToString(compressed.Sum(nil)); got != digest.String() || n.n != size {
			t.Errorf("layer %s (%d bytes): the blob is %s, %d bytes", digest, size, got, n.n)
		}
		if got := "sha256:" + hex.EncodeToString(uncompressed.Sum(nil)); got != diffID.String() {
			t.Errorf("layer %s: the configuration's diff ID is %s, the uncompressed layer's digest %s", digest, diffID, got)
		}
	}
	return files
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return len(p), nil
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
