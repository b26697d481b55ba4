// Package gobuild builds Go programs through the go command's cache of
// executables, so a program whose sources, flags and environment have not
// changed since it was last linked is copied from the cache, not linked
// again. Linking one of vacate's programs costs several CPU-seconds; the
// test suite builds the same few many times (each test process, the images
// twice, the install document once more).
//
// The go command caches the executables of `go run` (Go 1.24 and later),
// not those of `go build -o`. Build runs `go run -exec cp PKG OUT`: the go
// command builds PKG, or finds it in its cache, and "runs" it with cp,
// which copies it to OUT. Two differences from go build follow from go run:
// the binary has no symbol table and no DWARF unless the flags say so
// (go run links with -s -w; -ldflags=-s=false keeps the symbol table), and
// a build with an empty build ID (-ldflags -buildid=) is never cached: the
// go command keys its cache by that ID.
package gobuild

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Options are how a program is built.
type Options struct {
	// Go is the go command; "" is "go" on PATH.
	Go string
	// Dir is the directory the go command runs in ("" is the current
	// one): it selects the module PKG is resolved in.
	Dir string
	// Env is the go command's environment (GOOS, GOARCH, CGO_ENABLED);
	// nil is this process's.
	Env []string
	// Flags are build flags: -trimpath, -ldflags, -race, ...
	Flags []string
}

// Build builds the main package pkg into the file out (created or
// replaced, executable).
func Build(ctx context.Context, opts Options, pkg, out string) error {
	var output bytes.Buffer
	if err := BuildLog(ctx, opts, pkg, out, &output); err != nil {
		return fmt.Errorf("%w\n%s", err, output.Bytes())
	}
	return nil
}

// BuildLog is Build, with the go command's output written to log.
func BuildLog(ctx context.Context, opts Options, pkg, out string, log io.Writer) error {
	gocmd := opts.Go
	if gocmd == "" {
		gocmd = "go"
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	cp, err := exec.LookPath("cp")
	if err != nil {
		return fmt.Errorf("building %s: the copy from the build cache needs cp: %w", pkg, err)
	}
	args := append([]string{"run", "-exec", cp}, opts.Flags...)
	// The program's only argument is where cp copies it (an absolute path:
	// never read as a flag).
	args = append(args, pkg, abs)
	cmd := exec.CommandContext(ctx, gocmd, args...)
	cmd.Dir, cmd.Env = opts.Dir, opts.Env
	cmd.Stdout, cmd.Stderr = log, log
	// cp copies over an existing file in place; a binary that is running
	// (a test's earlier copy) would refuse it ("text file busy").
	if err := os.Remove(abs); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("building %s: %w", pkg, err)
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building %s: %w", pkg, err)
	}
	return nil
}
