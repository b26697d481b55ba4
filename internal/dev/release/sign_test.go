package release

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	sgbundle "github.com/sigstore/sigstore-go/pkg/bundle"
	sgverify "github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// verifyOpts are cosign's checks for `cosign verify --key PUB
// --insecure-ignore-tlog` (cmd/cosign/cli/verify): the key, no
// transparency log, a bundle whose in-toto subject is the image.
func verifyOpts(t *testing.T, pubPath string) *cosign.CheckOpts {
	t.Helper()
	b, err := os.ReadFile(pubPath)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(b)
	if err != nil {
		t.Fatal(err)
	}
	v, err := signature.LoadDefaultVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	return &cosign.CheckOpts{SigVerifier: v, IgnoreTlog: true, NewBundleFormat: true, ClaimVerifier: cosign.IntotoSubjectClaimVerifier}
}

// TestSignaturesVerifyAsCosignVerifies makes a key for a trial, signs an
// image index, one of its images and a file with it, and checks them
// with cosign's own verification (as `cosign verify` and `cosign
// verify-blob` run it with --key and --insecure-ignore-tlog): the key's
// signatures verify; another key's, an unsigned image and a changed file
// do not.
func TestSignaturesVerifyAsCosignVerifies(t *testing.T) {
	ctx := context.Background()
	// Another key: the one cosign made (each key made or opened costs an
	// scrypt, seconds under the race detector).
	dir, other := t.TempDir(), filepath.Join("testdata", "cosign-made-key")
	password := []byte("trial")
	if err := GenerateKey(dir, password); err != nil {
		t.Fatal(err)
	}
	if err := GenerateKey(dir, password); err == nil || !strings.Contains(err.Error(), "cosign.key exists") {
		t.Errorf("a second key in the same directory: %v, want it refused", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the private key's file: %v, %v (want mode 0600)", fi, err)
	}
	if _, err := LoadSigner(filepath.Join(dir, KeyFile), []byte("wrong")); err == nil || !strings.Contains(err.Error(), "COSIGN_PASSWORD") {
		t.Errorf("the key with a wrong password: %v, want an error naming COSIGN_PASSWORD", err)
	}
	s, err := LoadSigner(filepath.Join(dir, KeyFile), password)
	if err != nil {
		t.Fatal(err)
	}

	reg := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(reg.Close)
	repo, err := name.NewRepository(strings.TrimPrefix(reg.URL, "http://") + "/acme/vacate-controller")
	if err != nil {
		t.Fatal(err)
	}
	idx, err := random.Index(64, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(repo.Tag("v1.2.3"), idx); err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	idxDigest, _ := idx.Digest()
	signed := []name.Digest{repo.Digest(idxDigest.String()), repo.Digest(im.Manifests[0].Digest.String())}
	unsigned := repo.Digest(im.Manifests[1].Digest.String())
	for _, d := range signed {
		if err := s.SignDigest(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range signed {
		if _, _, err := cosign.VerifyImageAttestations(ctx, d, verifyOpts(t, filepath.Join(dir, PublicKeyFile))); err != nil {
			t.Errorf("%s, signed with the key: %v", d, err)
		}
		if _, _, err := cosign.VerifyImageAttestations(ctx, d, verifyOpts(t, filepath.Join(other, PublicKeyFile))); err == nil || !strings.Contains(err.Error(), "no matching attestations") {
			t.Errorf("%s with another key: %v, want no matching attestations", d, err)
		}
	}
	if _, _, err := cosign.VerifyImageAttestations(ctx, unsigned, verifyOpts(t, filepath.Join(dir, PublicKeyFile))); err == nil {
		t.Errorf("%s, never signed, verifies", unsigned)
	} else {
		t.Logf("%s, never signed: %v", unsigned, err)
	}

	file := filepath.Join(t.TempDir(), Checksums)
	if err := os.WriteFile(file, []byte("0123  kubectl-vacate_v1.2.3_linux_amd64.tar.gz\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundlePath, err := s.SignBlob(file)
	if err != nil {
		t.Fatal(err)
	}
	if bundlePath != file+".sigstore.json" {
		t.Errorf("the file's bundle is %s", bundlePath)
	}
	verifyBlob := func(pub string, data []byte) error {
		b, err := sgbundle.LoadJSONFromPath(bundlePath)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cosign.VerifyNewBundle(ctx, verifyOpts(t, pub), sgverify.WithArtifact(bytes.NewReader(data)), b)
		return err
	}
	data, _ := os.ReadFile(file)
	if err := verifyBlob(filepath.Join(dir, PublicKeyFile), data); err != nil {
		t.Errorf("%s, signed with the key: %v", file, err)
	}
	if err := verifyBlob(filepath.Join(other, PublicKeyFile), data); err == nil {
		t.Errorf("%s verifies with another key", file)
	} else {
		t.Logf("%s with another key: %v", file, err)
	}
	tampered := bytes.Replace(data, []byte("0123"), []byte("0124"), 1)
	if err := verifyBlob(filepath.Join(dir, PublicKeyFile), tampered); err == nil {
		t.Errorf("%s, changed after it was signed, verifies", file)
	} else {
		t.Logf("%s changed: %v", file, err)
	}
}

// TestSignsWithAKeyCosignMade: a key made by `cosign generate-key-pair`
// (cosign 3.1.3; testdata/cosign-made-key, password "fixture", a test
// fixture that signs nothing real) signs a file that verifies with the
// public key cosign wrote, as `cosign verify-blob` checks it.
func TestSignsWithAKeyCosignMade(t *testing.T) {
	dir := filepath.Join("testdata", "cosign-made-key")
	s, err := LoadSigner(filepath.Join(dir, KeyFile), []byte("fixture"))
	if err != nil {
		t.Fatal(err)
	}
	pem, err := s.PublicKeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	written, _ := os.ReadFile(filepath.Join(dir, PublicKeyFile))
	if !bytes.Equal(bytes.TrimSpace(pem), bytes.TrimSpace(written)) {
		t.Errorf("the signer's public key:\n%s\ncosign wrote:\n%s", pem, written)
	}
	file := filepath.Join(t.TempDir(), "notes.md")
	if err := os.WriteFile(file, []byte("# vacate v1.2.3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bundlePath, err := s.SignBlob(file)
	if err != nil {
		t.Fatal(err)
	}
	b, err := sgbundle.LoadJSONFromPath(bundlePath)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cosign.VerifyNewBundle(context.Background(), verifyOpts(t, filepath.Join(dir, PublicKeyFile)), sgverify.WithArtifact(strings.NewReader("# vacate v1.2.3\n")), b); err != nil {
		t.Errorf("a file signed with cosign's key: %v", err)
	}
}

// TestReleaseChecksTheKeyBeforeBuilding: a wrong COSIGN_PASSWORD, or a
// file that is no key, stops the release before it builds or pushes
// anything.
func TestReleaseChecksTheKeyBeforeBuilding(t *testing.T) {
	dir := filepath.Join("testdata", "cosign-made-key")
	for key, want := range map[string]string{
		filepath.Join(dir, KeyFile):       "not a cosign private key that COSIGN_PASSWORD decrypts",
		filepath.Join(dir, PublicKeyFile): "not a cosign private key",
		filepath.Join(dir, "missing.key"): "no such file",
	} {
		out := t.TempDir()
		_, err := Run(context.Background(), Options{ModuleDir: filepath.Join("..", "..", ".."), Version: "v0.1.0", Registry: "127.0.0.1:1/acme",
			Out: out, AllowDirty: true, Key: key, KeyPassword: []byte("wrong")})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a release with the key %s: %v, want %q", key, err, want)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("a release with the key %s wrote %v", key, entries)
		}
	}
}

// TestUnsignedReleaseSaysSo: the notes of a release made with UNSIGNED=1
// say it is unsigned, and tell no one to verify it.
func TestUnsignedReleaseSaysSo(t *testing.T) {
	m := &Manifest{Version: "v1.2.3", Unsigned: true, Images: pushed, Chart: PushedChart{Ref: "oci://r/acme/charts/vacate", Version: "1.2.3", Digest: "sha256:4"}}
	notes := releaseNotes(Options{Version: "v1.2.3", BaseURL: DefaultBaseURL}, m, "- things\n")
	if !strings.Contains(notes, "UNSIGNED") || strings.Contains(notes, "cosign verify") {
		t.Errorf("an unsigned release's notes:\n%s", notes)
	}
	m.Unsigned, m.PublicKey, m.KeyFingerprint, m.ChecksumsSignature = false, PublicKeyFile, "ab12", Checksums+BundleSuffix
	notes = releaseNotes(Options{Version: "v1.2.3", BaseURL: DefaultBaseURL}, m, "- things\n")
	for _, want := range []string{"cosign verify --key cosign.pub --insecure-ignore-tlog " + pushed[0].Pinned(), "--bundle checksums.txt.sigstore.json", "`ab12`", "helm install vacate oci://r/acme/charts/vacate@sha256:4 --version 1.2.3"} {
		if !strings.Contains(notes, want) {
			t.Errorf("a signed release's notes lack %q:\n%s", want, notes)
		}
	}
}
