// Command image builds vacate's container images (internal/dev/image) without a
// Docker engine and writes them under --out: an OCI image layout per image
// (all platforms), a `docker load` tarball and an SPDX SBOM per platform,
// and images.json, which lists them with their digests:
//
//	go run ./hack/image --version v0.1.0 --repo ghcr.io/vacate-dev --out dist/images
//
// The images are dated by the commit (SOURCE_DATE_EPOCH when set), so the
// same commit gives the same digests.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/vacate-dev/vacate/internal/dev/image"
	buildversion "github.com/vacate-dev/vacate/internal/version"
)

func main() {
	version := flag.String("version", "dev", "the images' tag and version label")
	repo := flag.String("repo", "ghcr.io/vacate-dev", "registry and path the images are named under: <repo>/vacate-controller:<version>")
	out := flag.String("out", "dist/images", "output directory")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64", "os/arch pairs")
	only := flag.String("only", "", "build only this image (vacate-controller, vacate-agent or vacate-hook)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *version, *repo, *out, *platforms, *only); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, version, repo, out, platformList, only string) error {
	var ps []v1.Platform
	for _, s := range strings.Split(platformList, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("platform %q: %w", s, err)
		}
		ps = append(ps, *p)
	}
	created, err := commitTime()
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "vacate-images-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	revision := gitOutput("rev-parse", "HEAD")
	opts := image.Options{ModuleDir: ".", WorkDir: work, Platforms: ps, Version: version, Revision: revision,
		Created: created, Source: "https://github.com/vacate-dev/vacate",
		LDFlags: buildversion.LDFlags(version, revision, created.Format(time.RFC3339))}
	var written []*image.Written
	for _, prog := range image.Programs {
		if only != "" && prog.Name != only {
			continue
		}
		fmt.Printf("building %s for %s\n", prog.Name, platformList)
		b, err := image.Build(ctx, prog, opts)
		if err != nil {
			return err
		}
		w, err := image.Write(b, out, strings.TrimSuffix(repo, "/")+"/"+prog.Name+":"+version)
		if err != nil {
			return err
		}
		fmt.Printf("  %s@%s\n  OCI layout %s\n", w.Ref, w.Digest, w.Layout)
		for _, p := range ps {
			fmt.Printf("  %s: %s (docker load), SBOM %s\n", p, w.Tarballs[p.String()], filepath.Base(w.SBOMs[p.String()]))
		}
		written = append(written, w)
	}
	if len(written) == 0 {
		return fmt.Errorf("--only %q: not one of vacate's images", only)
	}
	if err := image.WriteIndex(out, written); err != nil {
		return err
	}
	fmt.Printf("listed in %s\n", filepath.Join(out, image.IndexFile))
	return nil
}

// commitTime is SOURCE_DATE_EPOCH when set, else the time of the commit
// checked out.
func commitTime() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = gitOutput("log", "-1", "--format=%ct")
	}
	if s == "" {
		return time.Time{}, fmt.Errorf("no commit time: set SOURCE_DATE_EPOCH (seconds since 1970) outside a git checkout")
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: %w", s, err)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func gitOutput(args ...string) string {
	b, err := exec.Command("git", args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
