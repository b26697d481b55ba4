// Command dist builds the kubectl-vacate archives for each platform and
// renders the krew plugin manifest (config/plugin/vacate.yaml) for them:
//
//	go run ./hack/dist --version v0.1.0 --out dist
package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
)

// Platform is one archive of the plugin.
type Platform struct {
	OS, Arch    string
	URI, SHA256 string
}

// Manifest is what the template config/plugin/vacate.yaml reads.
type Manifest struct {
	Version   string
	Platforms []Platform
}

func main() {
	version := flag.String("version", "dev", "version of the release")
	out := flag.String("out", "dist", "output directory")
	baseURL := flag.String("url", "https://github.com/vacate-dev/vacate/releases/download", "where the archives are published; the URI is <url>/<version>/<archive>")
	platforms := flag.String("platforms", "linux/amd64,linux/arm64,darwin/amd64,darwin/arm64", "os/arch pairs")
	flag.Parse()
	if err := run(*version, *out, *baseURL, strings.Split(*platforms, ",")); err != nil {
		fmt.Fprintf(os.Stderr, "dist: %v\n", err)
		os.Exit(1)
	}
}

func run(version, out, baseURL string, platforms []string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	m := Manifest{Version: version}
	for _, p := range platforms {
		goos, goarch, ok := strings.Cut(p, "/")
		if !ok {
			return fmt.Errorf("platform %q: want os/arch", p)
		}
		bin := filepath.Join(out, goos+"_"+goarch, "kubectl-vacate")
		build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/vacate")
		build.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
		build.Stdout, build.Stderr = os.Stdout, os.Stderr
		fmt.Printf("building kubectl-vacate for %s/%s\n", goos, goarch)
		if err := build.Run(); err != nil {
			return fmt.Errorf("building for %s: %w", p, err)
		}
		name := fmt.Sprintf("kubectl-vacate_%s_%s_%s.tar.gz", version, goos, goarch)
		sum, err := archive(filepath.Join(out, name), map[string]string{"kubectl-vacate": bin, "LICENSE": "LICENSE"})
		if err != nil {
			return err
		}
		m.Platforms = append(m.Platforms, Platform{OS: goos, Arch: goarch, SHA256: sum,
			URI: strings.TrimSuffix(baseURL, "/") + "/" + version + "/" + name})
	}
	f, err := os.Create(filepath.Join(out, "vacate.yaml"))
	if err != nil {
		return err
	}
	if err := Render(f, "config/plugin/vacate.yaml", m); err != nil {
		f.Close()
		return err
	}
	fmt.Printf("wrote %s\n", f.Name())
	return f.Close()
}

// Render fills the manifest template at path.
func Render(w io.Writer, path string, m Manifest) error {
	tmpl, err := template.ParseFiles(path)
	if err != nil {
		return fmt.Errorf("reading the manifest template: %w", err)
	}
	return tmpl.Execute(w, m)
}

// archive writes a tar.gz of files (name in archive -> path) and returns
// its sha256.
func archive(path string, files map[string]string) (string, error) {
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	sum, err := writeArchive(f, files)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return sum, err
}

func writeArchive(f io.Writer, files map[string]string) (string, error) {
	h := sha256.New()
	gz := gzip.NewWriter(io.MultiWriter(f, h))
	tw := tar.NewWriter(gz)
	for _, name := range []string{"kubectl-vacate", "LICENSE"} {
		src := files[name]
		info, err := os.Stat(src)
		if err != nil {
			return "", err
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: int64(info.Mode().Perm()), Size: info.Size(), ModTime: info.ModTime()}); err != nil {
			return "", err
		}
		in, err := os.Open(src)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(tw, in)
		in.Close()
		if err != nil {
			return "", err
		}
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	if err := gz.Close(); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
