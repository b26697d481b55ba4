// Command release makes a release of vacate (internal/dev/release),
// signed with a cosign key whose password is in COSIGN_PASSWORD:
//
//	go run ./hack/release --version v0.2.0 --registry ghcr.io/vacate-dev --key cosign.key
//
// or makes a key for a trial (cosign.key and cosign.pub in DIR):
//
//	go run ./hack/release --generate-key DIR
//
// `make release VERSION=... REGISTRY=... COSIGN_KEY=...` and `make
// release-key KEY_DIR=...` run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vacate-dev/vacate/internal/dev/release"
)

func main() {
	var o release.Options
	flag.StringVar(&o.Version, "version", "", "the release, such as v0.2.0")
	flag.StringVar(&o.Registry, "registry", "", "where the images and the chart are pushed, such as ghcr.io/vacate-dev")
	flag.StringVar(&o.Out, "out", "dist/release", "where the release's files are written: <out>/<version>")
	flag.StringVar(&o.BaseURL, "url", release.DefaultBaseURL, "where the release's files are published: <url>/<version>/<file>")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "the images' os/arch pairs")
	cliPlatforms := flag.String("cli-platforms", strings.Join(release.DefaultCLIPlatforms, ","), "the CLI archives' os/arch pairs")
	flag.BoolVar(&o.AllowDirty, "allow-dirty", false, "release a checkout with uncommitted changes (a trial)")
	flag.StringVar(&o.Key, "key", "", "the cosign private key that signs the release (its password in "+release.PasswordEnv+")")
	flag.BoolVar(&o.Unsigned, "unsigned", false, "sign nothing (a trial, never one to publish)")
	generate := flag.String("generate-key", "", "make a key pair for a trial in this directory ("+release.KeyFile+", "+release.PublicKeyFile+"), its password from "+release.PasswordEnv+", and exit")
	flag.Parse()
	if *generate != "" {
		if err := generateKey(*generate); err != nil {
			fmt.Fprintf(os.Stderr, "release: %v\n", err)
			os.Exit(1)
		}
		return
	}
	o.ModuleDir, o.Log, o.CLIPlatforms = ".", os.Stdout, strings.Split(*cliPlatforms, ",")
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(os.Stderr, "release: platform %q: %v\n", s, err)
			os.Exit(2)
		}
		o.ImagePlatforms = append(o.ImagePlatforms, *p)
	}
	if o.Key != "" && !o.Unsigned {
		password, err := keyPassword()
		if err != nil {
			fmt.Fprintf(os.Stderr, "release: %v\n", err)
			os.Exit(2)
		}
		o.KeyPassword = password
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := release.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}

// keyPassword is the key's password, from COSIGN_PASSWORD as cosign reads
// it: set, maybe empty (a key made without a password).
func keyPassword() ([]byte, error) {
	p, ok := os.LookupEnv(release.PasswordEnv)
	if !ok {
		return nil, fmt.Errorf("%s is not set: it holds the signing key's password (export %s=... ; empty for a key made without one)", release.PasswordEnv, release.PasswordEnv)
	}
	return []byte(p), nil
}

func generateKey(dir string) error {
	password, err := keyPassword()
	if err != nil {
		return err
	}
	if len(password) == 0 {
		return errors.New(release.PasswordEnv + " is empty: a key made here is encrypted with it; choose one")
	}
	if err := release.GenerateKey(dir, password); err != nil {
		return err
	}
	fmt.Printf("wrote %s (encrypted with %s) and %s: a key for trial releases; a release you publish is signed with a key kept in your CI's secrets\n",
		filepath.Join(dir, release.KeyFile), release.PasswordEnv, filepath.Join(dir, release.PublicKeyFile))
	return nil
}
