package image

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// SBOMArtifactType is the artifactType of the SBOMs Push attaches.
const SBOMArtifactType = "application/spdx+json"

// emptyConfig is the OCI empty descriptor's content, the config of an
// artifact that has none.
var emptyConfig = static.NewLayer([]byte("{}"), "application/vnd.oci.empty.v1+json")

// Pushed is one program's images in a registry.
type Pushed struct {
	// Ref is the tag pushed; Digest the image index's.
	Ref    string
	Digest v1.Hash
	// SBOMs are the digests of the SBOM artifacts, by platform: each refers
	// to its platform's image (OCI referrers, or the referrers tag schema
	// where a registry lacks the API).
	SBOMs map[string]v1.Hash
}

// Push pushes b's image index to ref (a tag) and, for each platform, the
// SBOM w wrote as an artifact whose subject is that platform's image.
func Push(ctx context.Context, b *Built, w *Written, ref string, opts ...remote.Option) (*Pushed, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w", ref, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	if err := remote.WriteIndex(tag, b.Index, opts...); err != nil {
		return nil, fmt.Errorf("pushing %s: %w", tag, err)
	}
	digest, err := b.Index.Digest()
	if err != nil {
		return nil, err
	}
	p := &Pushed{Ref: tag.String(), Digest: digest, SBOMs: map[string]v1.Hash{}}
	for _, pi := range b.Images {
		key := pi.Platform.String()
		doc, err := os.ReadFile(w.SBOMs[key])
		if err != nil {
			return nil, fmt.Errorf("the SBOM of %s for %s: %w", b.Program.Name, key, err)
		}
		subject, err := descriptorOf(pi.Image)
		if err != nil {
			return nil, err
		}
		h, err := pushSBOM(tag.Context(), subject, filepath.Base(w.SBOMs[key]), doc, opts)
		if err != nil {
			return nil, fmt.Errorf("pushing the SBOM of %s for %s: %w", b.Program.Name, key, err)
		}
		p.SBOMs[key] = h
	}
	return p, nil
}

func descriptorOf(img v1.Image) (v1.Descriptor, error) {
	mt, err := img.MediaType()
	if err != nil {
		return v1.Descriptor{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return v1.Descriptor{}, err
	}
	size, err := img.Size()
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: d, Size: size}, nil
}

// artifact is a manifest pushed as it is.
type artifact []byte

func (a artifact) RawManifest() ([]byte, error)        { return a, nil }
func (a artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// pushSBOM pushes doc as an OCI artifact (artifactType application/spdx+json,
// the empty config, one layer titled file) whose subject is the image.
func pushSBOM(repo name.Repository, subject v1.Descriptor, file string, doc []byte, opts []remote.Option) (v1.Hash, error) {
	layer := static.NewLayer(doc, SBOMArtifactType)
	var descs []v1.Descriptor
	for _, l := range []v1.Layer{emptyConfig, layer} {
		if err := remote.WriteLayer(repo, l, opts...); err != nil {
			return v1.Hash{}, err
		}
		d, err := l.Digest()
		if err != nil {
			return v1.Hash{}, err
		}
		size, err := l.Size()
		if err != nil {
			return v1.Hash{}, err
		}
		mt, err := l.MediaType()
		if err != nil {
			return v1.Hash{}, err
		}
		descs = append(descs, v1.Descriptor{MediaType: mt, Digest: d, Size: size})
	}
	descs[1].Annotations = map[string]string{"org.opencontainers.image.title": file}
	raw, err := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, ArtifactType: SBOMArtifactType,
		Config: descs[0], Layers: descs[1:], Subject: &subject})
	if err != nil {
		return v1.Hash{}, err
	}
	h, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return v1.Hash{}, err
	}
	if err := remote.Put(repo.Digest(h.String()), artifact(raw), opts...); err != nil {
		return v1.Hash{}, err
	}
	return h, nil
}
