package release

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	intotov1 "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/cosign/v3/pkg/cosign"
	ociremote "github.com/sigstore/cosign/v3/pkg/oci/remote"
	cosigntypes "github.com/sigstore/cosign/v3/pkg/types"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	signatureoptions "github.com/sigstore/sigstore/pkg/signature/options"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The files of a signing key, as `cosign generate-key-pair` names them.
const (
	// KeyFile is the private key: cosign's encrypted PEM ("ENCRYPTED
	// SIGSTORE PRIVATE KEY"), its password in PasswordEnv.
	KeyFile = "cosign.key"
	// PublicKeyFile is the public key (PEM), what `cosign verify --key`
	// takes. A release writes it beside its files.
	PublicKeyFile = "cosign.pub"
	// PasswordEnv holds the private key's password, as for cosign itself.
	PasswordEnv = "COSIGN_PASSWORD"
	// BundleSuffix names a file's signature: checksums.txt is signed by
	// checksums.txt.sigstore.json (a Sigstore bundle, what `cosign
	// sign-blob --bundle` writes and `cosign verify-blob --bundle` reads).
	BundleSuffix = ".sigstore.json"
)

// Signer signs a release's artifacts with a cosign key, as cosign 3 does
// with --key and no transparency log: an OCI artifact (an image index, an
// image, an SBOM, the chart) gets a Sigstore bundle (a DSSE envelope of an
// in-toto statement whose subject is the artifact's digest, predicate
// type https://sigstore.dev/cosign/sign/v1) attached to it as an OCI
// referrer, which `cosign verify --key cosign.pub --insecure-ignore-tlog`
// checks; a file gets a bundle of its own (a message signature), which
// `cosign verify-blob --key cosign.pub --insecure-ignore-tlog --bundle`
// checks. Nothing is sent to Rekor, Fulcio or a timestamp authority: the
// key alone vouches for the signatures.
type Signer struct {
	sv     signature.SignerVerifier
	pub    crypto.PublicKey
	hint   []byte
	keyAlg string
	alg    signature.AlgorithmDetails
}

// GenerateKey writes a new key pair into dir as cosign.key (encrypted with
// password, mode 0600) and cosign.pub, as `cosign generate-key-pair` does
// (ECDSA P-256). It never replaces a key: a file already there is an error.
func GenerateKey(dir string, password []byte) error {
	priv, pub := filepath.Join(dir, KeyFile), filepath.Join(dir, PublicKeyFile)
	for _, p := range []string{priv, pub} {
		if _, err := os.Stat(p); err == nil {
			return fmt.Errorf("%s exists: a key is never replaced (remove it, or give another directory)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	keys, err := cosign.GenerateKeyPair(func(bool) ([]byte, error) { return password, nil })
	if err != nil {
		return fmt.Errorf("generating a key pair: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(priv, keys.PrivateBytes, 0o600); err != nil {
		return err
	}
	return os.WriteFile(pub, keys.PublicBytes, 0o644)
}

// LoadSigner reads a cosign private key (from GenerateKey, `cosign
// generate-key-pair` or `cosign import-key-pair`) and decrypts it with
// password.
func LoadSigner(path string, password []byte) (*Signer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("the signing key: %w", err)
	}
	sv, err := cosign.LoadPrivateKey(b, password, nil)
	if err != nil {
		return nil, fmt.Errorf("the signing key %s is not a cosign private key that %s decrypts: %w", path, PasswordEnv, err)
	}
	pub, err := sv.PublicKey()
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	s := &Signer{sv: sv, pub: pub}
	// The hint that names the key in a bundle, as cosign writes it: the
	// base64 of the sha256 of the public key's DER.
	sum := sha256.Sum256(der)
	s.hint = []byte(base64.StdEncoding.EncodeToString(sum[:]))
	switch pub.(type) {
	case *ecdsa.PublicKey:
		s.keyAlg = "ECDSA"
	case *rsa.PublicKey:
		s.keyAlg = "RSA"
	case ed25519.PublicKey:
		s.keyAlg = "ED25519"
	default:
		return nil, fmt.Errorf("the signing key %s: unsupported key type %T", path, pub)
	}
	if s.alg, err = signature.GetDefaultAlgorithmDetails(pub, *cosign.GetDefaultLoadOptions(nil)...); err != nil {
		return nil, fmt.Errorf("the signing key %s: %w", path, err)
	}
	return s, nil
}

// PublicKeyPEM is the public key, as cosign.pub holds it.
func (s *Signer) PublicKeyPEM() ([]byte, error) { return cryptoutils.MarshalPublicKeyToPEM(s.pub) }

// Fingerprint names the key: the sha256 of its public key's DER, in hex.
func (s *Signer) Fingerprint() string {
	b, _ := base64.StdEncoding.DecodeString(string(s.hint))
	return fmt.Sprintf("%x", b)
}

// SignDigest signs the OCI artifact d and attaches the signature to it as
// a referrer in d's repository.
func (s *Signer) SignDigest(ctx context.Context, d name.Digest, opts ...remote.Option) error {
	algo, hex, ok := strings.Cut(d.DigestStr(), ":")
	if !ok {
		return fmt.Errorf("signing %s: not a digest", d)
	}
	statement := &intotov1.Statement{
		Type:          intotov1.StatementTypeUri,
		Subject:       []*intotov1.ResourceDescriptor{{Digest: map[string]string{algo: hex}}},
		PredicateType: cosigntypes.CosignSignPredicateType,
		Predicate:     &structpb.Struct{},
	}
	payload, err := protojson.Marshal(statement)
	if err != nil {
		return err
	}
	b, err := s.bundle(&sign.DSSEData{Data: payload, PayloadType: "application/vnd.in-toto+json"})
	if err != nil {
		return fmt.Errorf("signing %s: %w", d, err)
	}
	opts = append([]remote.Option{remote.WithContext(ctx)}, opts...)
	if err := ociremote.WriteAttestationNewBundleFormat(d, b, cosigntypes.CosignSignPredicateType, ociremote.WithRemoteOptions(opts...)); err != nil {
		return fmt.Errorf("attaching the signature of %s: %w", d, err)
	}
	return nil
}

// SignBlob signs the file at path into path+BundleSuffix and returns that
// file's path.
func (s *Signer) SignBlob(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	b, err := s.bundle(&sign.PlainData{Data: data})
	if err != nil {
		return "", fmt.Errorf("signing %s: %w", path, err)
	}
	out := path + BundleSuffix
	return out, os.WriteFile(out, b, 0o644)
}

// bundle signs content into a Sigstore bundle (JSON) that names the key
// by its hint and holds no certificate, log entry or timestamp.
func (s *Signer) bundle(content sign.Content) ([]byte, error) {
	b, err := sign.Bundle(content, keypair{s}, sign.BundleOptions{})
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(b)
}

// keypair is a Signer as sigstore-go signs with it (sign.Keypair), the way
// cosign adapts a loaded key.
type keypair struct{ s *Signer }

func (k keypair) GetHashAlgorithm() protocommon.HashAlgorithm { return k.s.alg.GetProtoHashType() }
func (k keypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return k.s.alg.GetSignatureAlgorithm()
}
func (k keypair) GetHint() []byte                { return k.s.hint }
func (k keypair) GetKeyAlgorithm() string        { return k.s.keyAlg }
func (k keypair) GetPublicKey() crypto.PublicKey { return k.s.pub }
func (k keypair) GetPublicKeyPem() (string, error) {
	b, err := k.s.PublicKeyPEM()
	return string(b), err
}

// SignData signs data, and returns the signature and the digest signed.
func (k keypair) SignData(ctx context.Context, data []byte) ([]byte, []byte, error) {
	var digest []byte
	opts := []signature.SignOption{signatureoptions.WithContext(ctx)}
	if h := k.s.alg.GetHashType(); h != 0 {
		w := h.New()
		w.Write(data)
		digest = w.Sum(nil)
		opts = append(opts, signatureoptions.WithDigest(digest))
	}
	sig, err := k.s.sv.SignMessage(bytes.NewReader(data), opts...)
	return sig, digest, err
}
