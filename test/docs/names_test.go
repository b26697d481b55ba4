// Package docs checks that the documentation for developers names only
// code that exists. It reads Go source and Markdown; it starts no cluster.
package docs

import (
	"bufio"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
)

// root is the repository, two levels up from this package.
const root = "../.."

// checkedDocs name code a newcomer follows: every Go name, file and path
// they cite must exist. docs/agent.md is not among them: it cites the
// kubelet's own code and configuration, which this module does not hold.
var checkedDocs = []string{"docs/architecture.md", "docs/operations.md", "docs/performance.md", "docs/evacuation.md", "docs/dev/test-suite.md", "docs/alerts.md", "docs/cli.md", "docs/endpoint-aware.md", "docs/install.md", "docs/policies.md", "docs/dev/security.md", "README.md"}

// topDirs are the repository's own folders: a path that starts with one
// is checked, any other (vacate.dev/drain, ~/.cache/...) is not a path of
// this tree.
var topDirs = map[string]bool{"api": true, "charts": true, "cmd": true, "config": true, "docs": true,
	"examples": true, "hack": true, "internal": true, "pkg": true, "test": true}

// code is what the Go source of the repository declares.
type code struct {
	// decls are the top-level names of each package, by package name.
	decls map[string]map[string]bool
	// members are the methods and fields of each type, by type name.
	members map[string]map[string]bool
	// names are every declared name: top-level, methods, fields.
	names map[string]bool
	// jsonFields are the field names of vacate's API, of its programs'
	// configuration files and of the Kubernetes objects the docs cite.
	jsonFields map[string]bool
	// files are the base names of every file.
	files map[string]bool
}

func readCode(t *testing.T) *code {
	t.Helper()
	c := &code{decls: map[string]map[string]bool{}, members: map[string]map[string]bool{}, names: map[string]bool{},
		jsonFields: map[string]bool{}, files: map[string]bool{}}
	add := func(m map[string]map[string]bool, key, name string) {
		if m[key] == nil {
			m[key] = map[string]bool{}
		}
		m[key][name] = true
		c.names[name] = true
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "dist" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		c.files[name] = true
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil || len(d.Recv.List) == 0 {
					add(c.decls, f.Name.Name, d.Name.Name)
					continue
				}
				add(c.members, receiverType(d.Recv.List[0].Type), d.Name.Name)
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						add(c.decls, f.Name.Name, s.Name.Name)
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									add(c.members, s.Name.Name, n.Name)
								}
								if field.Tag != nil {
									tag := reflect.StructTag(strings.Trim(field.Tag.Value, "`")).Get("json")
									if n, _, _ := strings.Cut(tag, ","); n != "" && n != "-" {
										c.jsonFields[n] = true
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							add(c.decls, f.Name.Name, n.Name)
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	visited := map[reflect.Type]bool{}
	for _, o := range kubernetesObjects {
		addFields(reflect.TypeOf(o), c.jsonFields, visited)
	}
	return c
}

// receiverType is the type name of a method's receiver (*T, T, T[K]).
func receiverType(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.StarExpr:
		return receiverType(x.X)
	case *ast.IndexExpr:
		return receiverType(x.X)
	case *ast.IndexListExpr:
		return receiverType(x.X)
	case *ast.Ident:
		return x.Name
	}
	return ""
}

// kubernetesObjects are the Kubernetes objects whose fields the docs cite
// (terminationGracePeriodSeconds, disruptionsAllowed, failurePolicy).
var kubernetesObjects = []any{corev1.Pod{}, corev1.Node{}, policyv1.PodDisruptionBudget{}, appsv1.Deployment{}, appsv1.DaemonSet{},
	admissionregistrationv1.MutatingWebhookConfiguration{}, admissionregistrationv1.ValidatingAdmissionPolicy{}}

// addFields adds the json names of t's fields, and of the fields of every
// struct they hold, to seen.
func addFields(t reflect.Type, seen map[string]bool, visited map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || visited[t] {
		return
	}
	visited[t] = true
	for i := range t.NumField() {
		f := t.Field(i)
		if n, _, _ := strings.Cut(f.Tag.Get("json"), ","); n != "" && n != "-" {
			seen[n] = true
		}
		addFields(f.Type, seen, visited)
	}
}

var (
	inlineCode = regexp.MustCompile("`([^`]+)`")
	identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// camel is a lowerCamel name (loadNode, heldNow): a Go name or an API
	// field, never an English word.
	camel = regexp.MustCompile(`^[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*$`)
)

// missing says what a cited name lacks in the code, or "" when it exists
// or is not a name of the code at all (a command, a label, an API field
// path such as status.requestTime).
func (c *code) missing(cited string) string {
	if strings.ContainsAny(cited, " <>{}=:~*$\"'") || strings.HasPrefix(cited, "-") {
		return ""
	}
	if strings.Contains(cited, "/") {
		first, _, _ := strings.Cut(cited, "/")
		if !topDirs[first] {
			return ""
		}
		path := strings.TrimSuffix(strings.TrimSuffix(cited, "..."), "/")
		if _, err := os.Stat(filepath.Join(root, path)); err != nil {
			return "no such file or folder in the repository"
		}
		return ""
	}
	if strings.HasSuffix(cited, ".go") {
		if !c.files[cited] {
			return "no Go file of that name in the repository"
		}
		return ""
	}
	name, call := strings.CutSuffix(cited, "()")
	parts := strings.Split(name, ".")
	for _, p := range parts {
		if !identifier.MatchString(p) {
			return "" // vacate.dev, values.schema.json
		}
	}
	switch len(parts) {
	case 1:
		switch {
		case call && !c.names[name]:
			return "no function or method of that name"
		case camel.MatchString(name) && !c.names[name] && !c.jsonFields[name]:
			return "no Go name or API field of that name"
		}
	case 2:
		owner, member := parts[0], parts[1]
		exported := member[0] >= 'A' && member[0] <= 'Z'
		if !exported && !call {
			return "" // a field path: spec.nodeName, timeouts.drain
		}
		pkg, isPkg := c.decls[owner]
		typ, isType := c.members[owner]
		switch {
		case !isPkg && !isType:
			return "" // another module's package (metav1.Condition)
		case pkg[member] || typ[member]:
			return ""
		case isPkg:
			return "package " + owner + " declares no " + member
		default:
			return "type " + owner + " has no method or field " + member
		}
	}
	return ""
}

// TestDocsNameOnlyCodeThatExists: every function, method, type, file and
// folder that the developer docs cite in inline code exists, so a newcomer
// who follows docs/architecture.md never looks for something renamed or
// removed. Fenced blocks (commands, output, YAML) are not read.
func TestDocsNameOnlyCodeThatExists(t *testing.T) {
	c := readCode(t)
	checked := 0
	for _, doc := range checkedDocs {
		f, err := os.Open(filepath.Join(root, doc))
		if err != nil {
			t.Fatal(err)
		}
		fenced := false
		sc := bufio.NewScanner(f)
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				fenced = !fenced
				continue
			}
			if fenced {
				continue
			}
			for _, m := range inlineCode.FindAllStringSubmatch(line, -1) {
				checked++
				if why := c.missing(m[1]); why != "" {
					t.Errorf("%s:%d cites `%s`: %s", doc, n, m[1], why)
				}
			}
		}
		_ = f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if checked < 100 {
		t.Fatalf("read only %d inline code spans in %v: the docs moved, or the reader is broken", checked, checkedDocs)
	}
}

// TestMissingFindsWhatIsNotThere: the check itself fails on names that do
// not exist, and passes names that are not code.
func TestMissingFindsWhatIsNotThere(t *testing.T) {
	c := readCode(t)
	for cited, wantMissing := range map[string]bool{
		"internal/controller/nodedrain": false,
		"internal/controller/stages":    true,
		"budget.go":                     false,
		"stages.go":                     true,
		"Queue.Handle":                  false,
		"Queue.Handel":                  true,
		"nodedrain.NewReconciler":       false,
		"nodedrain.NewReconcilers":      true,
		"loadNode":                      false,
		"loadNodes":                     true,
		"hold()":                        false,
		"unhold()":                      true,
		"maxParallelNodes":              false, // an API field
		"terminationGracePeriodSeconds": false, // a Kubernetes field
		"terminationGracePeriodSecs":    true,
		"status.requestTime":            false, // a field path
		"vacate.dev/drain":              false, // a label, not a path
		"metav1.Condition":              false, // another module
		"vacate plan":                   false, // a command
	} {
		if got := c.missing(cited) != ""; got != wantMissing {
			t.Errorf("missing(%q) = %q; want missing %v", cited, c.missing(cited), wantMissing)
		}
	}
}
