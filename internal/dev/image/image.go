// Package image builds vacate's container images from Go alone, with no
// Docker engine and no base image to download: one layer holding the static
// binary (built with CGO_ENABLED=0; time zone data is embedded by the
// programs themselves), a passwd and group naming the non-root user 65532, a
// writable /tmp and the licence, under an OCI image index of one image per
// architecture.
//
// Builds are reproducible: the binaries are built with -trimpath and no VCS
// stamp (their build ID is then a hash of the sources and flags alone), every file in the layer has the same owner and the time
// Options.Created (the commit's time), and the configuration holds no other
// time, so the same commit gives the same digests on any machine with the
// same Go toolchain.
package image

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/vacate-dev/vacate/internal/dev/gobuild"
)

// NonRoot is the user and group the images run as (distroless's "nonroot").
const NonRoot = 65532

// BinDir is where the binary lives in an image; the entrypoint is
// BinDir/<binary>.
const BinDir = "/usr/local/bin"

// Program is one of vacate's images: the binary and the Go package that
// builds it.
type Program struct {
	// Name is the binary's and the image's name, such as vacate-controller.
	Name string
	// Package is the main package, relative to the module root, such as
	// ./cmd/vacate-controller.
	Package string
	// Description is the image's org.opencontainers.image.description.
	Description string
}

// Programs are the images `make images` builds.
var Programs = []Program{
	{Name: "vacate-controller", Package: "./cmd/vacate-controller",
		Description: "vacate's operator: drains Kubernetes nodes safely, with stateful evacuation"},
	{Name: "vacate-agent", Package: "./cmd/vacate-agent",
		Description: "vacate's node agent: turns shutdown and cloud notices into drain requests"},
	{Name: "vacate-hook", Package: "./cmd/vacate-hook",
		Description: "vacate's evacuation sidecar: serves the HTTP evacuation protocol beside an app and runs its recipe's commands"},
}

// DefaultPlatforms are the architectures the images are built for.
var DefaultPlatforms = []v1.Platform{{OS: "linux", Architecture: "amd64"}, {OS: "linux", Architecture: "arm64"}}

// Options are what a build needs beyond the program.
type Options struct {
	// ModuleDir is the root of vacate's module, where go build runs.
	ModuleDir string
	// WorkDir holds the binaries while the images are built.
	WorkDir string
	// Platforms are the architectures, DefaultPlatforms when empty.
	Platforms []v1.Platform
	// Version and Revision label the images (org.opencontainers.image.version
	// and .revision).
	Version, Revision string
	// Created is the time recorded in the images: the commit's time, so that
	// a build of the same commit gives the same digest.
	Created time.Time
	// Source is the org.opencontainers.image.source label.
	Source string
	// Go is the go command, "go" when empty.
	Go string
	// LDFlags are more linker flags, such as the version stamp
	// (internal/version.LDFlags).
	LDFlags string
}

// Built is one program's images: the index and, per platform, the image and
// the modules its binary was built from (for the SBOM).
type Built struct {
	Program Program
	Index   v1.ImageIndex
	Images  []PlatformImage
}

// PlatformImage is one architecture's image of a program.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
	// BuildInfo is what the Go toolchain recorded in the binary: its
	// modules and build settings.
	BuildInfo *buildinfo.BuildInfo
}

// Build builds prog for every platform and assembles its image index.
func Build(ctx context.Context, prog Program, opts Options) (*Built, error) {
	platforms := opts.Platforms
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	if opts.Created.IsZero() {
		return nil, errors.New("building images: Options.Created is not set (the commit's time keeps builds reproducible)")
	}
	out := &Built{Program: prog}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range platforms {
		bin := filepath.Join(opts.WorkDir, prog.Name+"_"+p.OS+"_"+p.Architecture)
		if err := goBuild(ctx, opts, prog, p, bin); err != nil {
			return nil, err
		}
		img, info, err := imageOf(prog, p, bin, opts)
		if err != nil {
			return nil, fmt.Errorf("building the image of %s for %s: %w", prog.Name, p, err)
		}
		out.Images = append(out.Images, PlatformImage{Platform: p, Image: img, BuildInfo: info})
		platform := p
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &platform}})
	}
	out.Index = idx
	return out, nil
}

// goBuild builds a static binary of prog for platform p at bin. It is
// reproducible without clearing the build ID (-buildid=): with -trimpath the
// same sources and toolchain give the same bytes in any directory, and a
// binary with its build ID comes from the go command's cache when nothing of
// it changed (internal/dev/gobuild).
func goBuild(ctx context.Context, opts Options, prog Program, p v1.Platform, bin string) error {
	err := gobuild.Build(ctx, gobuild.Options{Go: opts.Go, Dir: opts.ModuleDir,
		Env:   append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture, "GOFLAGS="),
		Flags: []string{"-trimpath", "-buildvcs=false", strings.TrimSpace("-ldflags=-s -w " + opts.LDFlags)}}, prog.Package, bin)
	if err != nil {
		return fmt.Errorf("building %s for %s: %w", prog.Name, p, err)
	}
	return nil
}

// imageOf is the image of binary bin (built for p): its one layer and its
// configuration.
func imageOf(prog Program, p v1.Platform, bin string, opts Options) (v1.Image, *buildinfo.BuildInfo, error) {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the build information of %s: %w", bin, err)
	}
	bin0, err := os.ReadFile(bin)
	if err != nil {
		return nil, nil, err
	}
	licence, err := os.ReadFile(filepath.Join(opts.ModuleDir, "LICENSE"))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the licence: %w", err)
	}
	tarBytes, err := rootFS(prog.Name, bin0, licence, opts.Created)
	if err != nil {
		return nil, nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, nil, err
	}
	created := v1.Time{Time: opts.Created.UTC()}
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.Append(base, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created: created, CreatedBy: "vacate make images: " + prog.Package, Comment: "static binary, passwd, /tmp, licence"}})
	if err != nil {
		return nil, nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = p.Architecture, p.OS, p.Variant
	cf.Created = created
	user := fmt.Sprintf("%d:%d", NonRoot, NonRoot)
	cf.Config = v1.Config{
		User:       user,
		Entrypoint: []string{BinDir + "/" + prog.Name},
		WorkingDir: "/",
		Env:        []string{"PATH=" + BinDir + ":/usr/bin:/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       prog.Name,
			"org.opencontainers.image.description": prog.Description,
			"org.opencontainers.image.version":     opts.Version,
			"org.opencontainers.image.revision":    opts.Revision,
			"org.opencontainers.image.source":      opts.Source,
			"org.opencontainers.image.licenses":    "Apache-2.0",
			"org.opencontainers.image.created":     created.Format(time.RFC3339),
		},
	}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, nil, err
	}
	return img, info, nil
}

// rootFS is the layer's tar: the binary, a passwd and a group with root and
// nonroot, the non-root user's home, /tmp and the licence, all dated created.
func rootFS(name string, bin, licence []byte, created time.Time) ([]byte, error) {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", NonRoot, NonRoot)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", NonRoot)
	entries := []struct {
		name     string
		mode     int64
		dir      bool
		owner    int
		contents []byte
	}{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, contents: []byte(group)},
		{name: "etc/passwd", mode: 0o644, contents: []byte(passwd)},
		{name: "home/", mode: 0o755, dir: true},
		{name: "home/nonroot/", mode: 0o700, dir: true, owner: NonRoot},
		{name: "licenses/", mode: 0o755, dir: true},
		{name: "licenses/vacate/", mode: 0o755, dir: true},
		{name: "licenses/vacate/LICENSE", mode: 0o644, contents: licence},
		{name: "tmp/", mode: 0o1777, dir: true},
		{name: "usr/", mode: 0o755, dir: true},
		{name: "usr/local/", mode: 0o755, dir: true},
		{name: "usr/local/bin/", mode: 0o755, dir: true},
		{name: "usr/local/bin/" + name, mode: 0o755, contents: bin},
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.owner, Gid: e.owner, ModTime: created.UTC(), Format: tar.FormatUSTAR}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(e.contents))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.contents); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
