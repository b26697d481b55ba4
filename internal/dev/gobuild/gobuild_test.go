package gobuild_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/internal/dev/gobuild"
)

// TestBuildCopiesFromTheCache builds a new program three times: the first
// build links it (the go command's -x output shows the link step), Build
// then copies it without a link, and both copies run and are the same
// bytes.
func TestBuildCopiesFromTheCache(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/hello\n\ngo 1.24\n")
	// The text differs on every run, so the first build is never cached.
	greeting := fmt.Sprintf("hello %d", time.Now().UnixNano())
	write("main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\""+greeting+"\") }\n")
	opts := gobuild.Options{Dir: dir, Env: append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=", "GOWORK=off"), Flags: []string{"-trimpath"}}
	linked := func(out string) bool {
		t.Helper()
		x := opts
		x.Flags = append([]string{"-x"}, opts.Flags...)
		var log bytes.Buffer
		if err := gobuild.BuildLog(context.Background(), x, ".", out, &log); err != nil {
			t.Fatal(err)
		}
		return strings.Contains(log.String(), "/link -o ")
	}
	first, second := filepath.Join(t.TempDir(), "hello"), filepath.Join(t.TempDir(), "hello")
	if !linked(first) {
		t.Fatal("the first build of a new program shows no link step: the check below could not fail")
	}
	if linked(second) {
		t.Error("the second build linked the program again, not taken from the cache")
	}
	for _, bin := range []string{first, second} {
		out, err := exec.Command(bin).Output()
		if err != nil || strings.TrimSpace(string(out)) != greeting {
			t.Fatalf("%s: %q, %v", bin, out, err)
		}
	}
	a, _ := os.ReadFile(first)
	b, _ := os.ReadFile(second)
	if !bytes.Equal(a, b) {
		t.Error("the two builds differ")
	}
}

// TestBuildReportsTheCompilerError: a program that does not compile is an
// error that carries the go command's output.
func TestBuildReportsTheCompilerError(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/broken\n\ngo 1.24\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "main.go"), []byte("package main\n\nfunc main() { undefinedName() }\n"), 0o644)
	err := gobuild.Build(context.Background(), gobuild.Options{Dir: dir, Env: append(os.Environ(), "GOFLAGS=", "GOWORK=off")}, ".", filepath.Join(dir, "out"))
	if err == nil || !strings.Contains(err.Error(), "undefinedName") {
		t.Fatalf("err = %v, want the compiler's message", err)
	}
}
