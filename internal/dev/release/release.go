// Package release makes a release of vacate from Go alone (no Docker, no
// crane, no cosign): `make release VERSION=vX.Y.Z REGISTRY=...
// COSIGN_KEY=...` (hack/release) builds and pushes the images with their
// SBOMs and the chart as an OCI artifact, signs each of them with the
// key (sign.go: signatures `cosign verify --key` checks), and writes what
// a release page publishes: the CLI's archives with the krew manifest,
// install.yaml and agent.yaml for kubectl apply and the recipes'
// manifests (every image of vacate's named by the digest pushed), the
// checksums and their signature, the public key, and the release notes
// from CHANGELOG.md.
package release

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
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
	// Key is the cosign private key (cosign's encrypted PEM) that signs
	// the release; KeyPassword decrypts it (COSIGN_PASSWORD).
	Key         string
	KeyPassword []byte
	// Unsigned makes a release without signatures: a trial, never one to
	// publish. Key or Unsigned must be set, not both.
	Unsigned bool
	Log      io.Writer
}

// semver is a release version.
var semver = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Manifest is release.json: what was pushed and written.
type Manifest struct {
	Version string        `json:"version"`
	Commit  string        `json:"commit,omitempty"`
	Date    string        `json:"date"`
	Images  []PushedImage `json:"images"`
	Chart   PushedChart   `json:"chart"`
	// Files are the release page's files that checksums.txt lists (this
	// file among them).
	Files    []string `json:"files"`
	Checksum string   `json:"checksums"`
	// Signed is every OCI artifact the key signed, by digest
	// (REGISTRY/NAME@sha256:...): each image index, each platform's image,
	// each SBOM and the chart, in that order.
	Signed []string `json:"signed,omitempty"`
	// PublicKey is the file of the public key that verifies them (and
	// checksums.txt's signature, ChecksumsSignature); KeyFingerprint the
	// sha256 of its DER, in hex.
	PublicKey          string `json:"publicKey,omitempty"`
	KeyFingerprint     string `json:"keyFingerprint,omitempty"`
	ChecksumsSignature string `json:"checksumsSignature,omitempty"`
	// Unsigned: a trial made with UNSIGNED=1, nothing signed.
	Unsigned bool `json:"unsigned,omitempty"`
	// Recipes are the recipes' manifests (examples/*/manifests.yaml) with
	// vacate's images pinned; UnpinnedImages the images they name that are
	// not vacate's (the databases' and brokers' own), left as the recipes
	// name them.
	Recipes        []string `json:"recipes,omitempty"`
	UnpinnedImages []string `json:"unpinnedImages,omitempty"`
}

// PushedImage is one image of a release.
type PushedImage struct {
	Name string `json:"name"`
	// Ref is the tag pushed; Digest its image index's.
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// Platforms are each platform's image digest, SBOMs the digests of
	// their SBOM artifacts, by platform (os/arch).
	Platforms map[string]string `json:"platforms"`
	SBOMs     map[string]string `json:"sboms"`
}

// Pinned is the image by the digest of its index: REGISTRY/NAME@sha256:...
func (i PushedImage) Pinned() string {
	return strings.TrimSuffix(i.Ref, ":"+tagOf(i.Ref)) + "@" + i.Digest
}

// tagOf is the tag of a reference REPO:TAG.
func tagOf(ref string) string {
	if i := strings.LastIndex(ref, ":"); i > strings.LastIndex(ref, "/") {
		return ref[i+1:]
	}
	return ""
}

// Checksums is the file of sha256 sums, in sha256sum's format.
const Checksums = "checksums.txt"

// Run makes the release: it checks what the release is made from, pushes
// and signs the images and the chart, writes the release page's files, and
// seals them with checksums.txt and its signature.
func Run(ctx context.Context, o Options) (*Manifest, error) {
	r, err := start(o)
	if err != nil {
		return nil, err
	}
	if err := r.push(ctx); err != nil {
		return nil, err
	}
	if err := r.writeFiles(ctx); err != nil {
		return nil, err
	}
	if err := r.seal(); err != nil {
		return nil, err
	}
	fmt.Fprintf(r.o.Log, "release %s: pushed to %s; its files (for the release page) are in %s\n", r.o.Version, r.reg, r.out)
	return r.m, nil
}

// run is one release being made: what it is made from, where it goes, and
// the manifest its steps fill in.
type run struct {
	o     Options
	src   Source
	notes string
	// signer signs the release; nil for an unsigned trial.
	signer *Signer
	// out is the directory of the release page's files; reg the registry
	// and path the images and the chart go to.
	out, reg string
	ldflags  string
	m        *Manifest
}

// start checks the options, the checkout, the release notes and the key
// before anything is built (a wrong password stops the release first), and
// empties the release's directory.
func start(o Options) (*run, error) {
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
	r := &run{o: o, src: src, out: filepath.Join(o.Out, o.Version), reg: strings.TrimSuffix(o.Registry, "/"),
		ldflags: version.LDFlags(o.Version, src.Commit, src.DateString()),
		m:       &Manifest{Version: o.Version, Commit: src.Commit, Date: src.DateString(), Unsigned: o.Unsigned}}
	if r.notes, err = Notes(changelog, o.Version); err != nil {
		return nil, err
	}
	// The key first: a wrong password stops the release before it builds.
	if !o.Unsigned {
		if r.signer, err = LoadSigner(o.Key, o.KeyPassword); err != nil {
			return nil, err
		}
	} else {
		fmt.Fprintln(o.Log, "UNSIGNED=1: nothing of this release is signed (a trial; never publish it)")
	}
	if err := os.RemoveAll(r.out); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return nil, err
	}
	return r, nil
}

// push builds and pushes the images, packages and pushes the chart (which
// names the images by digest), and signs every artifact pushed.
func (r *run) push(ctx context.Context) error {
	o, m := r.o, r.m
	regName, _ := name.NewRegistry(strings.SplitN(r.reg, "/", 2)[0])
	plain := PlainHTTP(regName)
	var err error
	if m.Images, err = o.images(ctx, r.out, r.reg, r.src, r.ldflags); err != nil {
		return err
	}
	fmt.Fprintf(o.Log, "packaging the chart %s\n", ChartDir)
	chart, err := PackageChart(filepath.Join(o.ModuleDir, ChartDir), r.out, o.Version, r.reg, digests(m.Images), r.src.Date)
	if err != nil {
		return err
	}
	pushed, err := PushChart(chart, r.reg, o.Version, r.src.Date, plain)
	if err != nil {
		return err
	}
	m.Chart = *pushed
	fmt.Fprintf(o.Log, "  %s --version %s (%s)\n", pushed.Ref, pushed.Version, pushed.Digest)
	if r.signer != nil {
		if m.Signed, err = signArtifacts(ctx, r.signer, m, o.Log); err != nil {
			return err
		}
	}
	return nil
}

// writeFiles writes the release page's files but the checksums: the CLI's
// archives, install.yaml and agent.yaml, the recipes, the public key and
// the release notes.
func (r *run) writeFiles(ctx context.Context) error {
	o, m, out := r.o, r.m, r.out
	if _, err := Archives(ctx, ArchiveOptions{ModuleDir: o.ModuleDir, Out: out, Version: o.Version, LDFlags: r.ldflags,
		BaseURL: o.BaseURL, Platforms: o.CLIPlatforms, Created: r.src.Date, Log: o.Log}); err != nil {
		return err
	}
	if err := writeManifests(out, m.Images); err != nil {
		return err
	}
	var err error
	if m.Recipes, m.UnpinnedImages, err = writeRecipes(o.ModuleDir, out, m.Images); err != nil {
		return err
	}
	if r.signer != nil {
		pub, err := r.signer.PublicKeyPEM()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(out, PublicKeyFile), pub, 0o644); err != nil {
			return err
		}
		m.PublicKey, m.KeyFingerprint = PublicKeyFile, r.signer.Fingerprint()
	}
	return os.WriteFile(filepath.Join(out, "RELEASE_NOTES.md"), []byte(releaseNotes(o, m, r.notes)), 0o644)
}

// seal writes release.json and checksums.txt, which lists every file of the
// page, release.json among them, and signs checksums.txt.
func (r *run) seal() error {
	m, out := r.m, r.out
	// release.json is one of the files checksums.txt lists, so that what
	// it says (the digests) is vouched for by the signed checksums.
	var err error
	if m.Files, err = releaseFiles(out); err != nil {
		return err
	}
	m.Checksum = Checksums
	if r.signer != nil {
		m.ChecksumsSignature = Checksums + BundleSuffix
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "release.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := writeChecksums(out, m.Files); err != nil {
		return err
	}
	if r.signer != nil {
		if _, err := r.signer.SignBlob(filepath.Join(out, Checksums)); err != nil {
			return err
		}
		fmt.Fprintf(r.o.Log, "signed %s (%s) with the key %s\n", Checksums, m.ChecksumsSignature, m.KeyFingerprint)
	}
	return nil
}

// digests are the images' index digests by name.
func digests(images []PushedImage) map[string]string {
	d := map[string]string{}
	for _, i := range images {
		d[i.Name] = i.Digest
	}
	return d
}

// signArtifacts signs every OCI artifact of the release: each image's index, each
// platform's image and SBOM, and the chart; it returns their references.
func signArtifacts(ctx context.Context, s *Signer, m *Manifest, log io.Writer) ([]string, error) {
	var refs []string
	for _, i := range m.Images {
		repo := strings.TrimSuffix(i.Ref, ":"+tagOf(i.Ref))
		refs = append(refs, repo+"@"+i.Digest)
		for _, platforms := range []map[string]string{i.Platforms, i.SBOMs} {
			for _, p := range slices.Sorted(maps.Keys(platforms)) {
				refs = append(refs, repo+"@"+platforms[p])
			}
		}
	}
	refs = append(refs, strings.TrimPrefix(m.Chart.Ref, "oci://")+"@"+m.Chart.Digest)
	auth := remote.WithAuthFromKeychain(authn.DefaultKeychain)
	for _, r := range refs {
		d, err := name.NewDigest(r, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("signing %s: %w", r, err)
		}
		if err := s.SignDigest(ctx, d, auth); err != nil {
			return nil, err
		}
	}
	fmt.Fprintf(log, "signed %d artifacts (the images' indexes, each platform's image and SBOM, the chart) with the key %s\n", len(refs), s.Fingerprint())
	return refs, nil
}

func (o *Options) validate() error {
	var errs []error
	if !semver.MatchString(o.Version) {
		errs = append(errs, fmt.Errorf("VERSION %q is not a release version such as v0.2.0 or v0.2.0-rc.1", o.Version))
	}
	switch {
	case o.Key == "" && !o.Unsigned:
		errs = append(errs, fmt.Errorf("COSIGN_KEY is not set: a release is signed with a cosign private key, its password in %s (`make release-key` makes one for a trial; UNSIGNED=1 makes an unsigned trial)", PasswordEnv))
	case o.Key != "" && o.Unsigned:
		errs = append(errs, errors.New("COSIGN_KEY and UNSIGNED=1 are both set: a release is either signed or a trial"))
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
		pi := PushedImage{Name: prog.Name, Ref: p.Ref, Digest: p.Digest.String(), Platforms: map[string]string{}, SBOMs: map[string]string{}}
		for platform, h := range p.SBOMs {
			pi.SBOMs[platform] = h.String()
		}
		for _, img := range b.Images {
			h, err := img.Image.Digest()
			if err != nil {
				return nil, err
			}
			pi.Platforms[img.Platform.String()] = h.String()
		}
		fmt.Fprintf(o.Log, "  pushed %s@%s with %d SBOM(s)\n", p.Ref, p.Digest, len(p.SBOMs))
		pushed = append(pushed, pi)
	}
	return pushed, image.WriteIndex(dir, written)
}

// writeManifests writes install.yaml (the controller and all it needs) and
// agent.yaml (vacate-agent on every node), naming the release's images by
// digest.
func writeManifests(out string, images []PushedImage) error {
	pinned := map[string]string{}
	for _, i := range images {
		pinned[i.Name] = i.Pinned()
	}
	docs, err := bundle.Install(pinned["vacate-controller"], false)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "install.yaml"), []byte(bundle.Join(docs)), 0o644); err != nil {
		return err
	}
	a, err := agent.YAML(pinned["vacate-agent"])
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "agent.yaml"), []byte(bundle.Join([]string{a})), 0o644)
}

// releaseFiles are the files of the release page (those directly in out)
// that checksums.txt lists: all but it and its signature, and with
// release.json, written after.
func releaseFiles(out string) ([]string, error) {
	entries, err := os.ReadDir(out)
	if err != nil {
		return nil, err
	}
	names := []string{"release.json"}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == Checksums || e.Name() == Checksums+BundleSuffix || e.Name() == "release.json" {
			continue
		}
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names, nil
}

// writeChecksums writes checksums.txt for the files named.
func writeChecksums(out string, names []string) error {
	var b strings.Builder
	for _, n := range names {
		sum, err := sha256File(filepath.Join(out, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(out, Checksums), []byte(b.String()), 0o644)
}

// releaseNotes are the changelog's section, how to verify and install what
// was pushed, and the digests.
func releaseNotes(o Options, m *Manifest, notes string) string {
	var b strings.Builder
	base := strings.TrimSuffix(o.BaseURL, "/") + "/" + o.Version
	fmt.Fprintf(&b, "# vacate %s\n\n", o.Version)
	if m.Unsigned {
		b.WriteString("**UNSIGNED: a trial release (UNSIGNED=1). Nothing here is signed; do not install it anywhere that matters.**\n\n")
	}
	fmt.Fprintf(&b, "%s\n", notes)
	if !m.Unsigned {
		fmt.Fprintf(&b, "## Verify\n\nEverything is signed with the cosign key whose public half is %s (the sha256 of its DER: `%s`), with no transparency log: verify with the copy of `%s` you trust (docs/install.md, \"Verifying a release\"), and cosign 3's `--insecure-ignore-tlog`:\n\n",
			m.PublicKey, m.KeyFingerprint, m.PublicKey)
		fmt.Fprintf(&b, "```sh\ncosign verify-blob --key %s --insecure-ignore-tlog --bundle %s %s\nsha256sum --check %s\n", m.PublicKey, m.ChecksumsSignature, Checksums, Checksums)
		for _, i := range m.Images {
			fmt.Fprintf(&b, "cosign verify --key %s --insecure-ignore-tlog %s\n", m.PublicKey, i.Pinned())
		}
		fmt.Fprintf(&b, "cosign verify --key %s --insecure-ignore-tlog %s@%s\n```\n\n", m.PublicKey, strings.TrimPrefix(m.Chart.Ref, "oci://"), m.Chart.Digest)
		fmt.Fprintf(&b, "`release.json` lists every signed artifact (`signed`: each image index, each platform's image, each SBOM, the chart).\n\n")
	}
	b.WriteString("## Install\n\n")
	fmt.Fprintf(&b, "```sh\nhelm install vacate %s@%s --version %s --namespace vacate-system --create-namespace\n", m.Chart.Ref, m.Chart.Digest, m.Chart.Version)
	fmt.Fprintf(&b, "# or\nkubectl apply --server-side -f %s/install.yaml\n```\n\n", base)
	b.WriteString("The chart, `install.yaml`, `agent.yaml` and the recipes' manifests (`recipe-*.yaml`) name vacate's images by digest.\n")
	if len(m.UnpinnedImages) > 0 {
		b.WriteString("The recipes also name images that are not vacate's, by tag as the recipes do (pin them to the digests your registry serves):")
		for _, i := range m.UnpinnedImages {
			fmt.Fprintf(&b, " `%s`", i)
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "\nThe CLI: `kubectl krew install vacate`, or an archive below (`kubectl-vacate_%s_<os>_<arch>.tar.gz`).\n\n", o.Version)
	b.WriteString("## Images\n\n| image | digest |\n| --- | --- |\n")
	for _, i := range m.Images {
		fmt.Fprintf(&b, "| `%s` | `%s` |\n", i.Ref, i.Digest)
	}
	fmt.Fprintf(&b, "| `%s:%s` (chart) | `%s` |\n", strings.TrimPrefix(m.Chart.Ref, "oci://"), m.Chart.Version, m.Chart.Digest)
	fmt.Fprintf(&b, "\nEach platform's image has an SPDX SBOM attached as an OCI referrer (artifactType %s).\n", image.SBOMArtifactType)
	if m.Commit != "" {
		fmt.Fprintf(&b, "\nBuilt from commit %s (%s).\n", m.Commit, m.Date)
	}
	return b.String()
}
