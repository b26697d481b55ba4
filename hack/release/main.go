// Command release makes a release of vacate (internal/dev/release):
//
//	go run ./hack/release --version v0.2.0 --registry ghcr.io/vacate-dev
//
// `make release VERSION=... REGISTRY=...` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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
	flag.Parse()
	o.ModuleDir, o.Log, o.CLIPlatforms = ".", os.Stdout, strings.Split(*cliPlatforms, ",")
	for _, s := range strings.Split(*platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintf(os.Stderr, "release: platform %q: %v\n", s, err)
			os.Exit(2)
		}
		o.ImagePlatforms = append(o.ImagePlatforms, *p)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := release.Run(ctx, o); err != nil {
		fmt.Fprintf(os.Stderr, "release: %v\n", err)
		os.Exit(1)
	}
}
