// Command dist builds the kubectl-vacate archives for each platform and
// renders the krew plugin manifest (config/plugin/vacate.yaml) for them,
// as a release does (internal/dev/release), without pushing anything:
//
//	go run ./hack/dist --version v0.1.0 --out dist
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"

	"github.com/vacate-dev/vacate/internal/dev/release"
	"github.com/vacate-dev/vacate/internal/version"
)

func main() {
	v := flag.String("version", "dev", "version of the release")
	out := flag.String("out", "dist", "output directory")
	baseURL := flag.String("url", release.DefaultBaseURL, "where the archives are published; the URI is <url>/<version>/<archive>")
	platforms := flag.String("platforms", strings.Join(release.DefaultCLIPlatforms, ","), "os/arch pairs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	src, err := release.SourceOf(".")
	if err == nil {
		_, err = release.Archives(ctx, release.ArchiveOptions{ModuleDir: ".", Out: *out, Version: *v, BaseURL: *baseURL,
			LDFlags: version.LDFlags(*v, src.Commit, src.DateString()), Created: src.Date,
			Platforms: strings.Split(*platforms, ","), Log: os.Stdout})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "dist: %v\n", err)
		os.Exit(1)
	}
}
