// Package release makes a release of vacate from Go alone (no Docker, no
// crane): `make release VERSION=vX.Y.Z REGISTRY=...` (hack/release) builds
// and pushes the images with their SBOMs and the chart as an OCI artifact,
// and writes what a release page publishes: the CLI's archives with the
// krew manifest, install.yaml and agent.yaml for kubectl apply, the
// checksums, and the release notes from CHANGELOG.md.
package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/vacate-dev/vacate/config/agent"
	"github.com/vacate-dev/vacate/config/bundle"
	"github.com/vacate-dev/vacate/internal/dev/image"
	"github.com/vacate-dev/vacate/internal/version"
)

// DefaultBaseURL is where a release's files are published.
const DefaultBaseURL = "https://github.com/vacate-dev/vacate/releases/download"

// Options are a release's.
type Options struct {
	// ModuleDir is vacate's module root.
	ModuleDir string
	// Version is the release, vMAJOR.MINOR.PATCH with an optional
	// pre-release (-rc.1).
	Version string
	// Registry is where the images and the chart go: a registry host and
	// an optional path, such as ghcr.io/vacate-dev.
	Registry string
	// Out is the directory the files are written under: Out/<Version>.
	Out string
	// ImagePlatforms are the images' (image.DefaultPlatforms when empty);
	// CLIPlatforms the CLI archives' (DefaultCLIPlatforms when empty).
	ImagePlatforms []v1.Platform
	CLIPlatforms   []string
	// BaseURL is where the release's files are published.
	BaseURL string
	// AllowDirty releases a checkout with uncommitted changes.
	AllowDirty bool
	Log        io.Writer
}

// semver is a release version.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Manifest is release.json: what was pushed and written.
type Manifest struct {
	Version  string        `json:"version"`
	Commit   string        `json:"commit,omitempty"`
	Date     string        `json:"date"`
	Images   []PushedImage `json:"images"`
	Chart    PushedChart   `json:"chart"`
	Files    []string      `json:"files"`
	Checksum string        `json:"checksums"`
}

// PushedImage is one image of a release.
type PushedImage struct {
	Name   string            `json:"name"`
	Ref    string            `json:"ref"`
	Digest string            `json:"digest"`
	SBOMs  map[string]string `json:"sboms"`
}

// Checksums is the file of sha256 sums, in sha256sum's format.
const Checksums = "checksums.txt"

// Run makes the release.
func Run(ctx context.Context, o Options) (*Manifest, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	src, err := SourceOf(o.ModuleDir)
	if err != nil {
		return nil, err
	}
	if src.Dirty && !o.AllowDirty {
		return nil, errors.New("the checkout has uncommitted changes: a release is built from a commit (commit them, or ALLOW_DIRTY=1 for a trial)")
	}
	changelog, err := os.ReadFile(filepath.Join(o.ModuleDir, Changelog))
	if err != nil {
		return nil, fmt.Errorf("the release notes: %w", err)
	}
	notes, err := Notes(changelog, o.Version)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(o.Out, o.Version)
	if err := os.RemoveAll(out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	reg := strings.TrimSuffix(o.Registry, "/")
	regName, _ := name.NewRegistry(strings.SplitN(reg, "/", 2)[0])
	plain := PlainHTTP(regName)
	m := &Manifest{Version: o.Version, Commit: src.Commit, Date: src.DateString()}
	ldflags := version.LDFlags(o.Version, src.Commit, src.DateString())

	if m.Images, err = o.images(ctx, out, reg, src, ldflags); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "packaging the chart %s\n", ChartDir)
	chart, err := PackageChart(filepath.Join(o.ModuleDir, ChartDir), out, o.Version, reg, src.Date)
	if err != nil {
		return nil, err
	}
	pushed, err := PushChart(chart, reg, o.Version, src.Date, plain)
	if err != nil {
		return nil, err
	}
	m.Chart = *pushed
	fmt.Fprintf(o.Log, "  %s --version %s (%s)\n", pushed.Ref, pushed.Version, pushed.Digest)

	if _, err := Archives(ctx, ArchiveOptions{ModuleDir: o.ModuleDir, Out: out, Version: o.Version, LDFlags: ldflags,
		BaseURL: o.BaseURL, Platforms: o.CLIPlatforms, Created: src.Date, Log: o.Log}); err != nil {
		return nil, err
	}
	if err := writeManifests(out, reg, o.Version); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "RELEASE_NOTES.md"), []byte(releaseNotes(o, m, notes)), 0o644); err != nil {
		return nil, err
	}
	if m.Files, err = writeChecksums(out); err != nil {
		return nil, err
	}
	m.Checksum = Checksums
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(out, "release.json"), append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Log, "release %s: pushed to %s; its files (for the release page) are in %s\n", o.Version, reg, out)
	return m, nil
}

func (o *Options) validate() error {
	var errs []error
	if !semver.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("VERSION %q is not a release version such as v0.2.0 or v0.2.0-rc.1", o.Version))
	}
	if o.Registry == "" {
		errs = append(errs, errors.New("REGISTRY is not set: name where the images and the chart go, such as ghcr.io/acme"))
	} else if _, err := name.NewRepository(strings.TrimSuffix(o.Registry, "/")+"/vacate-controller", name.StrictValidation); err != nil || strings.Contains(o.Registry, "://") {
		errs = append(errs, fmt.Errorf("REGISTRY %q is not a registry and path such as ghcr.io/acme (no scheme, no tag)", o.Registry))
	}
	if len(o.CLIPlatforms) == 0 {
		o.CLIPlatforms = DefaultCLIPlatforms
	}
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	return errors.Join(errs...)
}

// images builds, writes (under out/images) and pushes every image.
func (o *Options) images(ctx context.Context, out, reg string, src Source, ldflags string) ([]PushedImage, error) {
	work, err := os.MkdirTemp("", "vacate-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(out, "images")
	opts := image.Options{ModuleDir: o.ModuleDir, WorkDir: work, Platforms: o.ImagePlatforms, Version: o.Version, Revision: src.Commit,
		Created: src.Date, Source: "https://github.com/vacate-dev/vacate", LDFlags: ldflags}
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	var pushed []PushedImage
	var written []*image.Written
	for _, prog := range image.Programs {
		fmt.Fprintf(o.Log, "building %s\n", prog.Name)
		b, err := image.Build(ctx, prog, opts)
		if err != nil {
			return nil, err
		}
		ref := reg + "/" + prog.Name + ":" + o.Version
		w, err := image.Write(b, dir, ref)
		if err != nil {
			return nil, err
		}
		written = append(written, w)
		p, err := image.Push(ctx, b, w, ref, auth)
		if err != nil {
			return nil, err
		}
		pi := PushedImage{Name: prog.Name, Ref: p.Ref, Digest: p.Digest.String(), SBOMs: map[string]string{}}
		for platform, h := range p.SBOMs {
			pi.SBOMs[platform] = h.String()
		}
		fmt.Fprintf(o.Log, "  pushed %s@%s with %d SBOM(s)\n", p.Ref, p.Digest, len(p.SBOMs))
		pushed = append(pushed, pi)
	}
	return pushed, image.WriteIndex(dir, written)
}

// writeManifests writes install.yaml (the controller and all it needs) and
// agent.yaml (vacate-agent on every node) for the release's images.
func writeManifests(out, reg, v string) error {
	docs, err := bundle.Install(reg+"/vacate-controller:"+v, false)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), []byte(bundle.Join(docs)), 0o644); err != nil {
		return err
	}
	a, err := agent.YAML(reg + "/vacate-agent:" + v)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "agent.yaml"), []byte(bundle.Join([]string{a})), 0o644)
}

// writeChecksums writes checksums.txt for the release's files (those
// directly in out) and returns their names.
func writeChecksums(out string) ([]string, error) {
	entries, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	var names []string
	var b strings.Builder
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == Checksums || e.Name() == "release.json" {
			continue
		}
		sum, err := sha256File(filepath.Join(out, e.Name()))
		if err != nil {
			return nil, err
		}
		names = append(names, e.Name())
		fmt.Fprintf(&b, "%s  %s\n", sum, e.Name())
	}
	slices.Sort(names)
	return names, os.WriteFile(filepath.Join(out, Checksums), []byte(b.String()), 0o644)
}

// releaseNotes are the changelog's section and how to install what was
// pushed.
func releaseNotes(o Options, m *Manifest, notes string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# vacate %s\n\n%s\n## Install\n\n", o.Version, notes)
	fmt.Fprintf(&b, "```sh\nhelm install vacate %s --version %s --namespace vacate-system --create-namespace\n", m.Chart.Ref, m.Chart.Version)
	fmt.Fprintf(&b, "# or\nkubectl apply --server-side -f %s/%s/install.yaml\n```\n\n", strings.TrimSuffix(o.BaseURL, "/"), o.Version)
	fmt.Fprintf(&b, "The CLI: `kubectl krew install vacate`, or an archive below (`kubectl-vacate_%s_<os>_<arch>.tar.gz`).\n\n", o.Version)
	b.WriteString("## Images\n\n| image | digest |\n| --- | --- |\n")
	for _, i := range m.Images {
		fmt.Fprintf(&b, "| `%s` | `%s` |\n", i.Ref, i.Digest)
	}
	fmt.Fprintf(&b, "\nEach platform's image has an SPDX SBOM attached as an OCI referrer (artifactType %s).\n", image.SBOMArtifactType)
	if m.Commit != "" {
		fmt.Fprintf(&b, "\nBuilt from commit %s (%s).\n", m.Commit, m.Date)
	}
	return b.String()
}
