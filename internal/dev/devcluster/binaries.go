package devcluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Environment variables that override where vacate keeps things.
const (
	// EnvCacheDir overrides the cache directory (default: the user cache
	// directory plus "vacate", for example ~/.cache/vacate).
	EnvCacheDir = "VACATE_CACHE_DIR"
	// EnvSourceDir points at a vacate checkout, for building the binaries
	// when the working directory is not inside one.
	EnvSourceDir = "VACATE_SOURCE_DIR"
	// EnvClustersDir overrides where dev clusters keep their files (default:
	// the cache directory plus "clusters").
	EnvClustersDir = "VACATE_CLUSTERS_DIR"
)

const stampFile = ".source-sha256"

// ErrBinariesMissing is returned when the pinned binaries are not in the
// cache and there is no vacate checkout to build them from.
var ErrBinariesMissing = errors.New("control-plane binaries are not built")

// CacheDir is where vacate keeps built binaries and local clusters.
func CacheDir() (string, error) {
	if dir := os.Getenv(EnvCacheDir); dir != "" {
		return filepath.Abs(dir)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache directory (set %s): %w", EnvCacheDir, err)
	}
	return filepath.Join(base, "vacate"), nil
}

// Binaries maps a component name to the path of its executable.
type Binaries map[string]string

// EnsureBinaries returns the pinned component binaries of the control plane
// $VACATE_K8S_VERSION selects (SelectedControlPlane), as EnsureControlPlane.
func EnsureBinaries(ctx context.Context, progress io.Writer) (Binaries, error) {
	cp, err := SelectedControlPlane()
	if err != nil {
		return nil, err
	}
	return EnsureControlPlane(ctx, cp, progress)
}

// EnsureControlPlane returns the component binaries of cp, building them
// from source through the Go module proxy the first time (a few minutes) and
// reusing the cached build afterwards. The cache is keyed by version and is
// shared by every checkout on the machine; concurrent callers (test packages
// running in parallel) wait for one another through a file lock.
func EnsureControlPlane(ctx context.Context, cp ControlPlane, progress io.Writer) (Binaries, error) {
	cache, err := CacheDir()
	if err != nil {
		return nil, err
	}
	src := findSourceDir()
	bins := Binaries{}
	for _, s := range binarySources(cp) {
		dir := filepath.Join(cache, "bin", s.version)
		if err := ensureSource(ctx, s, dir, src, progress); err != nil {
			return nil, err
		}
		for _, n := range s.names {
			bins[n] = filepath.Join(dir, n)
		}
	}
	return bins, nil
}

// EnsureTool returns the path of the pinned test tool name (such as
// EC2MetadataMock), building it from source the first time like
// EnsureBinaries does the dev cluster's components, and reusing the cached
// build afterwards. Only the module that builds name is built.
func EnsureTool(ctx context.Context, name string, progress io.Writer) (string, error) {
	for _, s := range toolSources {
		if !slices.Contains(s.names, name) {
			continue
		}
		cache, err := CacheDir()
		if err != nil {
			return "", err
		}
		dir := filepath.Join(cache, "bin", s.version)
		if err := ensureSource(ctx, s, dir, findSourceDir(), progress); err != nil {
			return "", err
		}
		return filepath.Join(dir, name), nil
	}
	return "", fmt.Errorf("no test tool named %q", name)
}

func ensureSource(ctx context.Context, s binarySource, dir, src string, progress io.Writer) error {
	var hash string
	if src != "" {
		h, err := hashModule(filepath.Join(src, "hack", s.module))
		if err != nil {
			return err
		}
		hash = h
		if s.ldflags != "" {
			sum := sha256.Sum256([]byte(h + " " + s.ldflags))
			hash = hex.EncodeToString(sum[:])[:16]
		}
	}
	if upToDate(dir, s.names, hash) {
		return nil
	}
	if src == "" {
		return fmt.Errorf("%w: %s not found in %s; run `make tools` in a vacate checkout, or set %s to one",
			ErrBinariesMissing, strings.Join(s.names, ", "), dir, EnvSourceDir)
	}
	unlock, err := lockFile(ctx, dir+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if upToDate(dir, s.names, hash) { // another process built it while we waited
		return nil
	}
	return buildModule(ctx, s, filepath.Join(src, "hack", s.module), dir, hash, progress)
}

// upToDate reports whether dir holds every binary and, when hash is known,
// was built from the same sources.
func upToDate(dir string, names []string, hash string) bool {
	for _, n := range names {
		if fi, err := os.Stat(filepath.Join(dir, n)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	if hash == "" {
		return true
	}
	got, err := os.ReadFile(filepath.Join(dir, stampFile))
	return err == nil && strings.TrimSpace(string(got)) == hash
}

func buildModule(ctx context.Context, s binarySource, modDir, dir, hash string, progress io.Writer) error {
	fmt.Fprintf(progress, "building %s (%s) from source; the first build takes a few minutes\n",
		strings.Join(s.names, ", "), s.version)
	start := time.Now()
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("creating cache directory: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), s.version+".tmp-")
	if err != nil {
		return fmt.Errorf("creating build directory: %w", err)
	}
	defer os.RemoveAll(tmp)

	cmd := exec.CommandContext(ctx, goTool(), "build", "-trimpath", "-ldflags", s.ldflags, "-o", tmp+string(filepath.Separator), "./...")
	cmd.Dir = modDir
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s in %s: %w\n%s", s.version, modDir, err, tail(out.Bytes(), 40))
	}
	if err := os.WriteFile(filepath.Join(tmp, stampFile), []byte(hash+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing build stamp: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("replacing old build %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("installing build into %s: %w", dir, err)
	}
	fmt.Fprintf(progress, "built %s into %s in %s\n", s.version, dir, time.Since(start).Round(time.Second))
	return nil
}

// goTool is the go command that builds the binaries: the one running the
// tests when there is one, else the one on PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); isFile(p) {
			return p
		}
	}
	return "go"
}

// hashModule hashes the files that decide what a hack module builds.
func hashModule(dir string) (string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".go") || d.Name() == "go.mod" || d.Name() == "go.sum") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("reading build sources in %s: %w", dir, err)
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("reading build sources: %w", err)
		}
		rel, _ := filepath.Rel(dir, f)
		fmt.Fprintf(h, "%s %d\n", filepath.ToSlash(rel), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// findSourceDir finds a vacate checkout: $VACATE_SOURCE_DIR, or the first
// parent of the working directory that holds hack/controlplane/go.mod.
func findSourceDir() string {
	if dir := os.Getenv(EnvSourceDir); dir != "" {
		return dir
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if isFile(filepath.Join(dir, "hack", "controlplane", "go.mod")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
}

// lockFile takes an exclusive lock on path, waiting for it as long as ctx
// allows.
func lockFile(ctx context.Context, path string) (func(), error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("creating lock directory: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening lock %s: %w", path, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for lock %s: %w", path, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
