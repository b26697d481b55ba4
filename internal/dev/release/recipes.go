package release

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// RecipesGlob finds the recipes' manifests, relative to the module root:
// each recipe of examples/ that runs vacate-hook beside an app has one.
const RecipesGlob = "examples/*/manifests.yaml"

// vacateImage matches a reference to one of vacate's images in a
// manifest, as the recipes name them: ghcr.io/vacate-dev/NAME with a tag,
// a digest or neither.
var vacateImage = regexp.MustCompile(`ghcr\.io/vacate-dev/(vacate-controller|vacate-agent|vacate-hook)(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?\b`)

// imageLine matches a manifest's image field (`image: REF`, maybe as a
// list item, maybe quoted, maybe with a comment after).
var imageLine = regexp.MustCompile(`(?m)^[\s-]*image:\s*["']?([^"'\s#]+)`)

// writeRecipes writes each recipe's manifests as recipe-NAME.yaml in out,
// with vacate's images in the release's registry, by digest. It returns
// the files written and the other images the recipes name (not vacate's:
// left as they are).
func writeRecipes(moduleDir, out string, images []PushedImage) (files, unpinned []string, err error) {
	pinned := map[string]string{}
	for _, i := range images {
		pinned[i.Name] = i.Pinned()
	}
	paths, err := filepath.Glob(filepath.Join(moduleDir, RecipesGlob))
	if err != nil {
		return nil, nil, err
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, nil, err
		}
		var missing error
		text := vacateImage.ReplaceAllStringFunc(string(b), func(ref string) string {
			img := vacateImage.FindStringSubmatch(ref)[1]
			if pinned[img] == "" {
				missing = fmt.Errorf("%s names %s, which the release did not push", p, ref)
			}
			return pinned[img]
		})
		if missing != nil {
			return nil, nil, missing
		}
		for _, m := range imageLine.FindAllStringSubmatch(text, -1) {
			if !strings.Contains(m[1], "@sha256:") && !slices.Contains(unpinned, m[1]) {
				unpinned = append(unpinned, m[1])
			}
		}
		name := "recipe-" + filepath.Base(filepath.Dir(p)) + ".yaml"
		if err := os.WriteFile(filepath.Join(out, name), []byte(text), 0o644); err != nil {
			return nil, nil, err
		}
		files = append(files, name)
	}
	slices.Sort(unpinned)
	return files, unpinned, nil
}
