package image_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vacate-dev/vacate/internal/dev/image"
)

// TestIndexListsWhatTheDirectoryHolds: images.json lists every image
// written, with paths relative to the directory; a later build of one
// image (--only) replaces its entry and keeps the other; a damaged index is
// an error that names the file, not a silent overwrite.
func TestIndexListsWhatTheDirectoryHolds(t *testing.T) {
	dir := t.TempDir()
	written := func(name, hex string) *image.Written {
		return &image.Written{Ref: "registry.example/vacate/" + name + ":v1", Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat(hex, 64)},
			Layout:   filepath.Join(dir, name),
			Tarballs: map[string]string{"linux/amd64": filepath.Join(dir, name+"_linux_amd64.tar")},
			SBOMs:    map[string]string{"linux/amd64": filepath.Join(dir, name+"_linux_amd64.spdx.json")}}
	}
	if err := image.WriteIndex(dir, []*image.Written{written("vacate-controller", "a"), written("vacate-agent", "b")}); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, image.IndexFile))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), dir) {
		t.Errorf("%s holds absolute paths:\n%s", image.IndexFile, raw)
	}
	if err := image.WriteIndex(dir, []*image.Written{written("vacate-agent", "c")}); err != nil {
		t.Fatal(err)
	}
	got, err := image.ReadIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["vacate-controller"].Digest.Hex != strings.Repeat("a", 64) || got["vacate-agent"].Digest.Hex != strings.Repeat("c", 64) {
		t.Fatalf("after rebuilding the agent: %+v", got)
	}
	if w := got["vacate-agent"]; w.Layout != filepath.Join(dir, "vacate-agent") || w.Tarballs["linux/amd64"] != filepath.Join(dir, "vacate-agent_linux_amd64.tar") ||
		w.SBOMs["linux/amd64"] != filepath.Join(dir, "vacate-agent_linux_amd64.spdx.json") {
		t.Errorf("agent's paths read back: %+v", w)
	}

	if err := os.WriteFile(filepath.Join(dir, image.IndexFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	err = image.WriteIndex(dir, []*image.Written{written("vacate-agent", "d")})
	if err == nil || !strings.Contains(err.Error(), image.IndexFile) {
		t.Errorf("writing over a damaged index: %v, want an error naming %s", err, image.IndexFile)
	}
}
