package image

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// IndexFile is the file in the output directory that lists what was
// written: each image's reference and index digest, and its files relative
// to that directory. Release automation reads it rather than guessing file
// names.
const IndexFile = "images.json"

// indexEntry is one image in IndexFile. Paths are relative to the output
// directory, so the directory can be moved or archived whole.
type indexEntry struct {
	Name     string            `json:"name"`
	Ref      string            `json:"ref"`
	Digest   string            `json:"digest"`
	Layout   string            `json:"layout"`
	Tarballs map[string]string `json:"tarballs"`
	SBOMs    map[string]string `json:"sboms"`
}

type indexDoc struct {
	Images []indexEntry `json:"images"`
}

// WriteIndex writes dir/images.json listing ws, which Write put under dir.
// The images of an earlier run that ws does not replace stay listed (a
// build of one image with --only): the index lists what dir holds.
func WriteIndex(dir string, ws []*Written) error {
	var doc indexDoc
	if b, err := os.ReadFile(filepath.Join(dir, IndexFile)); err == nil {
		if err := json.Unmarshal(b, &doc); err != nil {
			return fmt.Errorf("%s: %w (remove it and build again)", filepath.Join(dir, IndexFile), err)
		}
	}
	replaced := map[string]bool{}
	for _, w := range ws {
		replaced[filepath.Base(w.Layout)] = true
	}
	kept := doc.Images[:0]
	for _, e := range doc.Images {
		if !replaced[e.Name] {
			kept = append(kept, e)
		}
	}
	doc.Images = kept
	for _, w := range ws {
		e := indexEntry{Name: filepath.Base(w.Layout), Ref: w.Ref, Digest: w.Digest.String()}
		var err error
		if e.Layout, err = filepath.Rel(dir, w.Layout); err != nil {
			return err
		}
		if e.Tarballs, err = relPaths(dir, w.Tarballs); err != nil {
			return err
		}
		if e.SBOMs, err = relPaths(dir, w.SBOMs); err != nil {
			return err
		}
		doc.Images = append(doc.Images, e)
	}
	sort.Slice(doc.Images, func(i, j int) bool { return doc.Images[i].Name < doc.Images[j].Name })
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, IndexFile), append(b, '\n'), 0o644)
}

// ReadIndex reads dir/images.json back, by image name, with paths joined to
// dir.
func ReadIndex(dir string) (map[string]*Written, error) {
	path := filepath.Join(dir, IndexFile)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc indexDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[string]*Written{}
	for _, e := range doc.Images {
		h, err := v1.NewHash(e.Digest)
		if err != nil {
			return nil, fmt.Errorf("%s: image %s: %w", path, e.Name, err)
		}
		out[e.Name] = &Written{Ref: e.Ref, Digest: h, Layout: filepath.Join(dir, e.Layout),
			Tarballs: joinPaths(dir, e.Tarballs), SBOMs: joinPaths(dir, e.SBOMs)}
	}
	return out, nil
}

// relPaths is files (by platform) relative to dir.
func relPaths(dir string, files map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(files))
	for p, f := range files {
		rel, err := filepath.Rel(dir, f)
		if err != nil {
			return nil, err
		}
		out[p] = rel
	}
	return out, nil
}

// joinPaths is files (by platform, relative to dir) joined to dir.
func joinPaths(dir string, files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for p, f := range files {
		out[p] = filepath.Join(dir, f)
	}
	return out
}
