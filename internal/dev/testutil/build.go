package testutil

import (
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"testing"

	"github.com/vacate-dev/vacate/internal/dev/gobuild"
	"github.com/vacate-dev/vacate/internal/version"
)

// BuildProgram builds the Go program pkg (an import path, or a directory
// relative to the test's) into the file out, and returns out. It builds as
// releases are built (CGO_ENABLED=0, -trimpath: internal/dev/image,
// hack/dist), with the symbol table (a test reads it): the tests then run
// the binaries users run, and share the build cache with `make images`,
// whose amd64 build would otherwise compile every dependency once more.
// The binary comes from the go command's cache of executables
// (internal/dev/gobuild) when nothing of it changed since another test
// process, or another run, built it.
//
// The programs are stamped with the version ProgramVersion, as a release
// stamps its own (internal/version).
func BuildProgram(t testing.TB, pkg, out string) string {
	t.Helper()
	opts := gobuild.Options{Env: append(os.Environ(), "CGO_ENABLED=0"),
		Flags: []string{"-trimpath", "-ldflags=-s=false " + version.LDFlags(ProgramVersion, "", "")}}
	if err := gobuild.Build(context.Background(), opts, pkg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// ProgramVersion is the version of the programs tests build.
const ProgramVersion = "v0.0.0-test"

// programs are the binaries Program built in this test process, in one
// directory, by import path.
var programs struct {
	sync.Mutex
	dir   string
	built map[string]string
}

// Program builds the program with import path pkg once for the test
// process (with BuildProgram: linking one of vacate's programs costs
// several CPU-seconds) and returns its path: a file named as the path's
// last element, beside every other program Program built (as `make build`
// lays them out). The caller must not change it. RemovePrograms removes
// them; testenv.Main calls it.
func Program(t testing.TB, pkg string) string {
	t.Helper()
	programs.Lock()
	defer programs.Unlock()
	if p, ok := programs.built[pkg]; ok {
		return p
	}
	if programs.dir == "" {
		dir, err := os.MkdirTemp("", "vacate-test-bin-")
		if err != nil {
			t.Fatal(err)
		}
		programs.dir, programs.built = dir, map[string]string{}
	}
	out := filepath.Join(programs.dir, path.Base(pkg))
	if _, clash := os.Stat(out); clash == nil {
		t.Fatalf("Program: %s and another program are both named %s", pkg, path.Base(pkg))
	}
	BuildProgram(t, pkg, out)
	programs.built[pkg] = out
	return out
}

// ProgramAs is Program's binary under another name, in a directory of the
// test's own: a hard link, or a copy where links are refused.
func ProgramAs(t testing.TB, pkg, name string) string {
	t.Helper()
	src := Program(t, pkg)
	out := filepath.Join(t.TempDir(), name)
	if err := os.Link(src, out); err == nil {
		return out
	}
	if err := copyFile(src, out); err != nil {
		t.Fatalf("copying %s to %s: %v", src, out, err)
	}
	return out
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// RemovePrograms removes what Program built in this process.
func RemovePrograms() {
	programs.Lock()
	defer programs.Unlock()
	if programs.dir != "" {
		if err := os.RemoveAll(programs.dir); err != nil {
			fmt.Fprintf(os.Stderr, "testutil: removing %s: %v\n", programs.dir, err)
		}
		programs.dir, programs.built = "", nil
	}
}
