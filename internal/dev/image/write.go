package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Written is where Write put one program's images.
type Written struct {
	// Ref is the image reference the images are tagged with.
	Ref string
	// Digest is the image index's digest: Ref@Digest names all platforms.
	Digest v1.Hash
	// Layout is the OCI image layout directory (for `crane push --index`,
	// skopeo or oras).
	Layout string
	// Tarballs are the per-platform `docker load` archives, by platform.
	Tarballs map[string]string
	// SBOMs are the per-platform SPDX documents, by platform.
	SBOMs map[string]string
}

// Write writes b under dir: an OCI image layout dir/<name> holding the index
// (annotated with ref as org.opencontainers.image.ref.name), a `docker load`
// tarball dir/<name>_<os>_<arch>.tar per platform tagged ref, and an SPDX
// SBOM dir/<name>_<os>_<arch>.spdx.json per platform. ref is a tagged
// reference such as ghcr.io/vacate-dev/vacate-controller:v0.1.0.
func Write(b *Built, dir, ref string) (*Written, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	digest, err := b.Index.Digest()
	if err != nil {
		return nil, err
	}
	w := &Written{Ref: tag.String(), Digest: digest, Layout: filepath.Join(dir, b.Program.Name),
		Tarballs: map[string]string{}, SBOMs: map[string]string{}}
	if err := os.RemoveAll(w.Layout); err != nil {
		return nil, err
	}
	p, err := layout.Write(w.Layout, empty.Index)
	if err != nil {
		return nil, fmt.Errorf("writing the image layout %s: %w", w.Layout, err)
	}
	if err := p.AppendIndex(b.Index, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": tag.String()})); err != nil {
		return nil, fmt.Errorf("writing the image layout %s: %w", w.Layout, err)
	}
	for _, pi := range b.Images {
		base := fmt.Sprintf("%s_%s_%s", b.Program.Name, pi.Platform.OS, pi.Platform.Architecture)
		key := pi.Platform.String()
		w.Tarballs[key] = filepath.Join(dir, base+".tar")
		if err := tarball.WriteToFile(w.Tarballs[key], tag, pi.Image); err != nil {
			return nil, fmt.Errorf("writing %s: %w", w.Tarballs[key], err)
		}
		doc, err := SBOM(b.Program, pi, tag.String())
		if err != nil {
			return nil, err
		}
		w.SBOMs[key] = filepath.Join(dir, base+".spdx.json")
		if err := os.WriteFile(w.SBOMs[key], doc, 0o644); err != nil {
			return nil, err
		}
	}
	return w, nil
}

// SBOM is an SPDX 2.3 JSON document of one platform's image: the image, the
// binary and every Go module the toolchain recorded in it, with package URLs.
// It holds the image's creation time, not the time it was written, so it is
// as reproducible as the image.
func SBOM(prog Program, pi PlatformImage, ref string) ([]byte, error) {
	digest, err := pi.Image.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := pi.Image.ConfigFile()
	if err != nil {
		return nil, err
	}
	info := pi.BuildInfo
	imageID := "SPDXRef-Image"
	binID := "SPDXRef-Binary"
	pkgs := []spdxPackage{
		{ID: imageID, Name: ref, Version: digest.String(), Download: "NOASSERTION", Refs: []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl",
			Locator: fmt.Sprintf("pkg:oci/%s@%s?arch=%s&os=%s", lastPath(ref), strings.Replace(digest.String(), ":", "%3A", 1), pi.Platform.Architecture, pi.Platform.OS)}}},
		{ID: binID, Name: info.Main.Path, Version: info.Main.Version, Download: "NOASSERTION", Refs: []externalRef{goPURL(&info.Main)}},
	}
	rels := []spdxRelationship{{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: imageID}, {Element: imageID, Type: "CONTAINS", Related: binID}}
	deps := append([]*debug.Module(nil), info.Deps...)
	sort.Slice(deps, func(i, j int) bool { return deps[i].Path < deps[j].Path })
	for i, d := range deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		id := fmt.Sprintf("SPDXRef-Module-%d", i)
		pkgs = append(pkgs, spdxPackage{ID: id, Name: m.Path, Version: m.Version, Download: "NOASSERTION", Refs: []externalRef{goPURL(m)}})
		rels = append(rels, spdxRelationship{Element: binID, Type: "DEPENDS_ON", Related: id})
	}
	pkgs = append(pkgs, spdxPackage{ID: "SPDXRef-Go", Name: "go", Version: info.GoVersion, Download: "NOASSERTION",
		Refs: []externalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/stdlib@" + info.GoVersion}}})
	rels = append(rels, spdxRelationship{Element: binID, Type: "DEPENDS_ON", Related: "SPDXRef-Go"})
	doc := map[string]any{
		"spdxVersion":       "SPDX-2.3",
		"dataLicense":       "CC0-1.0",
		"SPDXID":            "SPDXRef-DOCUMENT",
		"name":              fmt.Sprintf("%s %s", prog.Name, pi.Platform),
		"documentNamespace": fmt.Sprintf("https://vacate.dev/spdx/%s/%s/%s", prog.Name, pi.Platform.Architecture, digest.Hex),
		"creationInfo": map[string]any{
			"created":  cf.Created.UTC().Format("2006-01-02T15:04:05Z"),
			"creators": []string{"Tool: vacate-make-images"},
		},
		"packages":      pkgs,
		"relationships": rels,
	}
	return json.MarshalIndent(doc, "", "  ")
}

func goPURL(m *debug.Module) externalRef {
	v := m.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	return externalRef{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + m.Path + "@" + v}
}

// externalRef, spdxPackage and spdxRelationship are the parts of SPDX 2.3's
// JSON that SBOM writes.
type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxPackage struct {
	ID            string        `json:"SPDXID"`
	Name          string        `json:"name"`
	Version       string        `json:"versionInfo,omitempty"`
	Download      string        `json:"downloadLocation"`
	FilesAnalyzed bool          `json:"filesAnalyzed"`
	Refs          []externalRef `json:"externalRefs,omitempty"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

func lastPath(ref string) string {
	r := ref
	if i := strings.LastIndex(r, ":"); i > strings.LastIndex(r, "/") {
		r = r[:i]
	}
	return r[strings.LastIndex(r, "/")+1:]
}
