package install

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// releaseJSON is what the test reads of a release's release.json (as
// docs/install.md documents it).
type releaseJSON struct {
	Version string `json:"version"`
	Images  []struct {
		Name   string `json:"name"`
		Ref    string `json:"ref"`
		Digest string `json:"digest"`
	} `json:"images"`
	Chart struct {
		Ref     string `json:"ref"`
		Version string `json:"version"`
		Digest  string `json:"digest"`
	} `json:"chart"`
	Signed             []string `json:"signed"`
	PublicKey          string   `json:"publicKey"`
	ChecksumsSignature string   `json:"checksumsSignature"`
	Unsigned           bool     `json:"unsigned"`
	Recipes            []string `json:"recipes"`
	UnpinnedImages     []string `json:"unpinnedImages"`
}

// pinned is each image of the release by the digest of its index.
func (m *releaseJSON) pinned() map[string]string {
	p := map[string]string{}
	for _, i := range m.Images {
		p[i.Name] = strings.TrimSuffix(i.Ref, ":"+m.Version) + "@" + i.Digest
	}
	return p
}

// readRelease reads the release.json of the release in dir.
func readRelease(t *testing.T, dir string) *releaseJSON {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "release.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := &releaseJSON{}
	if err := json.Unmarshal(b, m); err != nil {
		t.Fatalf("release.json: %v", err)
	}
	return m
}

// imagesIn collects the values of every field named image in a decoded
// object (containers, init containers, a RabbitmqCluster's spec.image).
func imagesIn(v any, into *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "image" {
				*into = append(*into, s)
			} else {
				imagesIn(x, into)
			}
		}
	case []any:
		for _, x := range v {
			imagesIn(x, into)
		}
	}
}

// checkPinned checks that every manifest of the release in dir (install.yaml,
// agent.yaml, the recipes) and the released chart's default values name
// vacate's images by the digest pushed to regPath, that the registry's
// tags name the same digests, and that the key signed each of them; and
// that the images that are not vacate's are those release.json reports.
func checkPinned(t *testing.T, dir string, m *releaseJSON, regPath string) {
	t.Helper()
	pinned := m.pinned()
	for _, i := range m.Images {
		if !strings.HasPrefix(i.Ref, regPath+"/"+i.Name+":") {
			t.Errorf("release.json: %s was pushed as %s, not to %s", i.Name, i.Ref, regPath)
		}
		// What the registry serves under the tag is what the manifests pin.
		desc, err := remote.Head(mustRef(t, i.Ref))
		if err != nil {
			t.Errorf("%s in the registry: %v", i.Ref, err)
		} else if desc.Digest.String() != i.Digest {
			t.Errorf("%s is %s in the registry, %s in release.json", i.Ref, desc.Digest, i.Digest)
		}
		if !slices.Contains(m.Signed, pinned[i.Name]) {
			t.Errorf("release.json's signed list lacks %s", pinned[i.Name])
		}
	}
	if len(pinned) != 3 {
		t.Fatalf("release.json names the images %v, want vacate-controller, vacate-agent and vacate-hook", pinned)
	}
	if chart := strings.TrimPrefix(m.Chart.Ref, "oci://") + "@" + m.Chart.Digest; !slices.Contains(m.Signed, chart) {
		t.Errorf("release.json's signed list lacks the chart %s", chart)
	}

	recipes, err := filepath.Glob(filepath.Join(repoRoot(t), "examples", "*", "manifests.yaml"))
	if err != nil || len(recipes) < 3 || len(m.Recipes) != len(recipes) {
		t.Errorf("the release has the recipes %v; the checkout %v (%v)", m.Recipes, recipes, err)
	}
	want := map[string][]string{"install.yaml": {pinned["vacate-controller"]}, "agent.yaml": {pinned["vacate-agent"]}}
	for _, r := range m.Recipes {
		want[r] = []string{pinned["vacate-hook"]}
	}
	var unpinned []string
	for file, theirs := range want {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Error(err)
			continue
		}
		var refs []string
		for _, o := range decodeYAML(t, b) {
			imagesIn(o.Object, &refs)
		}
		for _, ref := range theirs {
			if !slices.Contains(refs, ref) {
				t.Errorf("%s does not name %s: it names %v", file, ref, refs)
			}
		}
		for _, ref := range refs {
			switch {
			case slices.Contains(theirs, ref):
			case strings.Contains(ref, "vacate"):
				t.Errorf("%s names %s, want vacate's images by the digest pushed (%v)", file, ref, theirs)
			case !slices.Contains(m.UnpinnedImages, ref):
				t.Errorf("%s names %s, which release.json does not report among the unpinned images %v", file, ref, m.UnpinnedImages)
			default:
				unpinned = append(unpinned, ref)
			}
		}
	}
	slices.Sort(unpinned)
	if unpinned = slices.Compact(unpinned); !slices.Equal(unpinned, m.UnpinnedImages) {
		t.Errorf("release.json reports the unpinned images %v; the recipes name %v", m.UnpinnedImages, unpinned)
	}

	ch, err := loader.LoadFile(filepath.Join(dir, "vacate-"+m.Chart.Version+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	agent, _ := ch.Values["agent"].(map[string]any)
	for img, v := range map[string]any{"vacate-controller": ch.Values["image"], "vacate-agent": agent["image"]} {
		values, _ := v.(map[string]any)
		if got := values["repository"].(string) + "@" + values["digest"].(string); got != pinned[img] {
			t.Errorf("the released chart's %s image is %s, want %s", img, got, pinned[img])
		}
	}
}

func mustRef(t *testing.T, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// checkVerificationFails runs cosign (the binary the document ran) where
// verification must fail: checksums.txt changed after it was signed; the
// release's image checked against another key (one `cosign
// generate-key-pair` made); an image an attacker pushed and signed with
// that other key (by `cosign sign`), checked against the release's key.
// Each is paired with the same command that passes, so the failure is the
// change's.
func checkVerificationFails(t *testing.T, tools, dir string, m *releaseJSON) {
	t.Helper()
	cosign := filepath.Join(tools, "cosign")
	run := func(wantOK bool, why string, args ...string) string {
		t.Helper()
		cmd := exec.Command(cosign, args...)
		cmd.Env = append(os.Environ(), "COSIGN_PASSWORD=another", "HOME="+t.TempDir())
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if (err == nil) != wantOK {
			t.Errorf("%s: cosign %s: %v, want it to %s:\n%s", why, strings.Join(args, " "), err, map[bool]string{true: "pass", false: "fail"}[wantOK], out)
		}
		return string(out)
	}
	pub := filepath.Join(dir, m.PublicKey)
	if m.PublicKey == "" || m.ChecksumsSignature == "" || m.Unsigned {
		t.Fatalf("release.json: public key %q, checksums' signature %q, unsigned %v", m.PublicKey, m.ChecksumsSignature, m.Unsigned)
	}
	sums, err := os.ReadFile(filepath.Join(dir, "checksums.txt"))
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "checksums.txt")
	// One hex digit of one sum changed: a file swapped for another.
	changed := []byte(strings.Replace(string(sums), string(sums[0]), map[bool]string{true: "1", false: "0"}[sums[0] == '0'], 1))
	if err := os.WriteFile(tampered, changed, 0o644); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, m.ChecksumsSignature)
	run(true, "the signed checksums.txt", "verify-blob", "--key", pub, "--insecure-ignore-tlog", "--bundle", bundle, filepath.Join(dir, "checksums.txt"))
	if out := run(false, "checksums.txt changed after it was signed", "verify-blob", "--key", pub, "--insecure-ignore-tlog", "--bundle", bundle, tampered); !strings.Contains(out, "invalid signature") {
		t.Errorf("a changed checksums.txt fails for another reason than its signature:\n%s", out)
	}

	other := t.TempDir()
	cmd := exec.Command(cosign, "generate-key-pair")
	cmd.Dir, cmd.Env = other, append(os.Environ(), "COSIGN_PASSWORD=another")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	otherPub := filepath.Join(other, "cosign.pub")
	controller := m.pinned()["vacate-controller"]
	if out := run(false, "the release's image against another key", "verify", "--key", otherPub, "--insecure-ignore-tlog", controller); !strings.Contains(out, "no matching attestations") {
		t.Errorf("the release's image against another key fails for another reason than the key:\n%s", out)
	}

	// An attacker's image, pushed beside the release's and signed with the
	// other key: cosign takes that signature with the other key and refuses
	// the image with the release's.
	repo, err := name.NewRepository(strings.TrimSuffix(m.Images[0].Ref, ":"+m.Version))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag("forged"), forged); err != nil {
		t.Fatal(err)
	}
	d, _ := forged.Digest()
	// Offline, as the release signs: no transparency log, no signing
	// configuration from Sigstore's trust root.
	run(true, "signing the forged image with the other key", "sign", "--key", filepath.Join(other, "cosign.key"), "--use-signing-config=false", "--tlog-upload=false", "--yes", repo.Digest(d.String()).String())
	run(true, "the forged image against the key that signed it", "verify", "--key", otherPub, "--insecure-ignore-tlog", repo.Digest(d.String()).String())
	if out := run(false, "an image signed by another key against the release's key", "verify", "--key", pub, "--insecure-ignore-tlog", repo.Digest(d.String()).String()); !strings.Contains(out, "no matching attestations") {
		t.Errorf("an image signed by another key fails for another reason than the key:\n%s", out)
	}
}
