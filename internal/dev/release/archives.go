package release

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/gobuild"
)

// KrewTemplate is the krew plugin manifest's template, relative to the
// module root.
const KrewTemplate = "config/plugin/vacate.yaml"

// CompletionHelper is the script kubectl (1.26+) runs to complete
// `kubectl vacate <TAB>` (config/plugin): the archives carry it beside
// kubectl-vacate.
const CompletionHelper = "kubectl_complete-vacate"

// DefaultCLIPlatforms are the platforms of the CLI's archives.
var DefaultCLIPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

// Platform is one archive of the plugin, as the krew manifest lists it.
type Platform struct {
	OS, Arch    string
	URI, SHA256 string
	// File is the archive's name.
	File string
}

// KrewManifest is what the krew manifest template reads.
type KrewManifest struct {
	Version   string
	Platforms []Platform
}

// ArchiveOptions say which CLI archives to build.
type ArchiveOptions struct {
	// ModuleDir is vacate's module root; Out the directory written.
	ModuleDir, Out string
	Version        string
	// LDFlags stamp the binaries (internal/version.LDFlags).
	LDFlags string
	// BaseURL is where the archives are published: an archive's URI is
	// <BaseURL>/<Version>/<archive>.
	BaseURL   string
	Platforms []string
	// Created dates the archives' files (the commit's time), so that the
	// same commit gives the same archives.
	Created time.Time
	// Log receives a line per step.
	Log io.Writer
}

// Archives builds the CLI for each platform (as users download it: no
// cgo, no symbol tables), packs each into
// kubectl-vacate_<version>_<os>_<arch>.tar.gz with the completion helper
// and the licence, and renders
// the krew manifest vacate.yaml for them.
func Archives(ctx context.Context, o ArchiveOptions) (*KrewManifest, error) {
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	m := &KrewManifest{Version: o.Version}
	work, err := os.MkdirTemp("", "vacate-cli-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	for _, p := range o.Platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok || goos == "" || goarch == "" {
			return nil, fmt.Errorf("platform %q: want os/arch, such as linux/amd64", p)
		}
		bin := filepath.Join(work, goos+"_"+goarch, "kubectl-vacate")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "building kubectl-vacate for %s/%s\n", goos, goarch)
		err := gobuild.Build(ctx, gobuild.Options{Dir: o.ModuleDir,
			Env:   append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0", "GOFLAGS="),
			Flags: []string{"-trimpath", "-buildvcs=false", strings.TrimSpace("-ldflags=-s -w " + o.LDFlags)}}, "./cmd/vacate", bin)
		if err != nil {
			return nil, fmt.Errorf("building the CLI for %s: %w", p, err)
		}
		name := fmt.Sprintf("kubectl-vacate_%s_%s_%s.tar.gz", o.Version, goos, goarch)
		sum, err := archive(filepath.Join(o.Out, name), o.Created, []archived{
			{name: "kubectl-vacate", src: bin}, {name: CompletionHelper, src: filepath.Join(o.ModuleDir, "config", "plugin", CompletionHelper)},
			{name: "LICENSE", src: filepath.Join(o.ModuleDir, "LICENSE")}})
		if err != nil {
			return nil, err
		}
		m.Platforms = append(m.Platforms, Platform{OS: goos, Arch: goarch, SHA256: sum, File: name,
			URI: strings.TrimSuffix(o.BaseURL, "/") + "/" + o.Version + "/" + name})
	}
	f, err := os.Create(filepath.Join(o.Out, "vacate.yaml"))
	if err != nil {
		return nil, err
	}
	if err := RenderKrew(f, filepath.Join(o.ModuleDir, KrewTemplate), *m); err != nil {
		f.Close()
		return nil, err
	}
	fmt.Fprintf(o.Log, "wrote %s\n", f.Name())
	return m, f.Close()
}

// RenderKrew fills the krew manifest template at path.
func RenderKrew(w io.Writer, path string, m KrewManifest) error {
	tmpl, err := template.ParseFiles(path)
	if err != nil {
		return fmt.Errorf("reading the krew manifest template: %w", err)
	}
	return tmpl.Execute(w, m)
}

// archived is a file of an archive: its name there and its source.
type archived struct{ name, src string }

// archive writes a tar.gz of files, in order, and returns its sha256.
func archive(path string, mtime time.Time, files []archived) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	sum, err := writeArchive(f, mtime, files)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return sum, err
}

func writeArchive(f io.Writer, mtime time.Time, files []archived) (string, error) {
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	for _, a := range files {
		info, err := os.Stat(a.src)
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Name: a.name, Mode: int64(info.Mode().Perm()), Size: info.Size(), ModTime: mtime,
			Format: tar.FormatPAX}); err != nil {
			return "", err
		}
		in, err := os.Open(a.src)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(tw, in)
		in.Close()
		if err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sha256File is the hex sha256 of a file.
func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
