// Package house keeps the house's sizes: no Go file in internal/ over
// maxFileLines lines and no function over maxFuncLines, so that a file
// owns one concern and a function reads in one pass. It parses the source
// (go/parser); it starts nothing.
package house

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// root is the repository, two levels up from this package.
const root = "../.."

const (
	maxFileLines = 700
	// maxFuncLines counts a function from its func line to its closing
	// brace, both included.
	maxFuncLines = 100
)

// exceptions may exceed the limits, each for its reason: a file by its path
// from the repository's root, a function as path:Name (path:Type.Method for
// a method). An exception that is no longer needed fails the test, so the
// list only shrinks.
var exceptions = map[string]string{}

// TestFilesAndFunctionsKeepTheHousesSizes: every Go file under internal/
// (tests included, generated code not) is at most maxFileLines lines, and
// every function at most maxFuncLines, but for the exceptions.
func TestFilesAndFunctionsKeepTheHousesSizes(t *testing.T) {
	sizes, err := measure(filepath.Join(root, "internal"))
	if err != nil {
		t.Fatal(err)
	}
	var over []string
	byKey := map[string]size{}
	for _, s := range sizes {
		byKey[s.key] = s
		if s.lines > s.limit && exceptions[s.key] == "" {
			over = append(over, s.String())
		}
	}
	if len(over) > 0 {
		t.Errorf("%d file(s) or function(s) over the house's sizes: split each by concern into named parts "+
			"(an exception, with its reason, only for what cannot be split, such as generated code):\n%s",
			len(over), strings.Join(over, "\n"))
	}
	var stale []string
	for _, key := range sortedKeys(exceptions) {
		if s, ok := byKey[key]; !ok || s.lines <= s.limit {
			stale = append(stale, key)
		}
	}
	if len(stale) > 0 {
		t.Errorf("exception(s) no longer needed (within the limits, or gone): remove them from the list:\n%s", strings.Join(stale, "\n"))
	}
}

// size is the length of a file or of a function, and its limit.
type size struct {
	// key names it as the exceptions do.
	key string
	// line is where a function starts (0 for a file).
	line         int
	lines, limit int
}

func (s size) String() string {
	if s.line == 0 {
		return fmt.Sprintf("%s: %d lines (at most %d)", s.key, s.lines, s.limit)
	}
	file, fn, _ := strings.Cut(s.key, ":")
	return fmt.Sprintf("%s:%d: func %s: %d lines (at most %d)", file, s.line, fn, s.lines, s.limit)
}

// measure parses every Go file under dir but generated ones and returns the
// size of each file and of each function with a body.
func measure(dir string) ([]size, error) {
	var sizes []size
	fset := token.NewFileSet()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		sizes = append(sizes, size{key: rel, lines: bytes.Count(src, []byte("\n")), limit: maxFileLines})
		f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			start, end := fset.Position(fn.Pos()).Line, fset.Position(fn.End()).Line
			sizes = append(sizes, size{key: rel + ":" + funcName(fn), line: start, lines: end - start + 1, limit: maxFuncLines})
		}
		return nil
	})
	return sizes, err
}

// funcName is Name for a function, Type.Name for a method.
func funcName(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
