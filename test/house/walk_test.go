package house

import (
	"go/ast"
	"go/token"
	"go/types"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// module is the import path every walked function lives under.
const module = "github.com/vacate-dev/vacate/"

// walkPackages are the packages whose functions a walk descends into
// (their syntax is loaded); a call into another of the module's packages
// counts the file it enters but goes no deeper.
var walkPackages = []string{
	module + "internal/controller/nodedrain",
	module + "internal/eviction",
	module + "internal/drain",
}

// walk follows one parameter of a function through the calls that pass
// it on (or a value made from it: a field, an element, a result computed
// from it), in the order the code makes them (every branch, one after the
// other), into the functions of this module. It records the files it
// enters in that order: a stay is one or more functions entered in a row
// in one file; entering a file it had left is a return. A function
// entered again is counted, not walked again.
type walk struct {
	fset  *token.FileSet
	byObj map[*types.Func]*ast.FuncDecl
	info  map[*ast.FuncDecl]*types.Info
	seen  map[*types.Func]bool
	stays []string
	rooms map[string]bool
}

// TestTheStageThatQueuesEvictionsReadsInOnePass: following the pass's
// scope from the stage that queues evictions (nodedrain Reconciler.evict,
// parameter s) through the calls that pass it on, in the order the code
// makes them, enters at most maxRooms files and comes back to a file it
// had left at most maxReturns times (issue 42). docs/architecture.md
// lists the files.
func TestTheStageThatQueuesEvictionsReadsInOnePass(t *testing.T) {
	const maxRooms, maxReturns = 10, 5
	w := loadWalk(t)
	w.from(t, module+"internal/controller/nodedrain", "Reconciler", "evict", "s")
	returns := len(w.stays) - len(w.rooms)
	t.Logf("the evict stage's scope enters %d files, in this order (%d returns): %s", len(w.rooms), returns, strings.Join(w.stays, " → "))
	if len(w.rooms) > maxRooms || returns > maxReturns {
		t.Errorf("the evict stage's scope enters %d files (at most %d) and comes back %d times (at most %d): %s",
			len(w.rooms), maxRooms, returns, maxReturns, strings.Join(w.stays, " → "))
	}
}

// TestThePodsStepsStagesStayAsStraight: the stages before it, one step
// kind each, followed the same way, come back to a file they had left no
// more often than they do now (a ratchet: lower the figures as they
// improve).
func TestThePodsStepsStagesStayAsStraight(t *testing.T) {
	loaded := loadWalk(t)
	for _, c := range []struct {
		stage          string
		rooms, returns int
	}{
		{"nextSteps", 14, 13},
		{"endpointAware", 13, 43},
		{"surgePods", 11, 40},
		{"requestEvictions", 4, 12},
	} {
		w := loaded.fresh()
		w.from(t, module+"internal/controller/nodedrain", "Reconciler", c.stage, "s")
		returns := len(w.stays) - len(w.rooms)
		t.Logf("%s: %d files, %d returns: %s", c.stage, len(w.rooms), returns, strings.Join(w.stays, " → "))
		if len(w.rooms) > c.rooms || returns > c.returns {
			t.Errorf("%s enters %d files (at most %d) and comes back %d times (at most %d)", c.stage, len(w.rooms), c.rooms, returns, c.returns)
		}
	}
}

// loadWalk type-checks the walked packages from source.
func loadWalk(t *testing.T) *walk {
	t.Helper()
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedFiles | packages.NeedSyntax | packages.NeedTypes |
		packages.NeedTypesInfo, Dir: root, Fset: token.NewFileSet()}
	pkgs, err := packages.Load(cfg, walkPackages...)
	if err != nil {
		t.Fatal(err)
	}
	w := &walk{fset: cfg.Fset, byObj: map[*types.Func]*ast.FuncDecl{}, info: map[*ast.FuncDecl]*types.Info{},
		seen: map[*types.Func]bool{}, rooms: map[string]bool{}}
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("loading %s: %v", p.PkgPath, p.Errors)
		}
		for _, f := range p.Syntax {
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok {
					continue
				}
				if obj, ok := p.TypesInfo.Defs[fd.Name].(*types.Func); ok {
					w.byObj[obj], w.info[fd] = fd, p.TypesInfo
				}
			}
		}
	}
	return w
}

// fresh is a walk of the same packages that has not started.
func (w *walk) fresh() *walk {
	return &walk{fset: w.fset, byObj: w.byObj, info: w.info, seen: map[*types.Func]bool{}, rooms: map[string]bool{}}
}

// from walks param of the named method (or function, recv "").
func (w *walk) from(t *testing.T, pkg, recv, name, param string) {
	t.Helper()
	for obj, fd := range w.byObj {
		sig := obj.Type().(*types.Signature)
		if obj.Pkg().Path() != pkg || obj.Name() != name ||
			recv != "" && (sig.Recv() == nil || !strings.HasSuffix(sig.Recv().Type().String(), "."+recv)) {
			continue
		}
		for _, field := range fd.Type.Params.List {
			for _, n := range field.Names {
				if n.Name == param {
					w.enter(obj, fd, map[types.Object]bool{w.info[fd].Defs[n]: true})
					return
				}
			}
		}
		t.Fatalf("%s.%s has no parameter %s", recv, name, param)
	}
	t.Fatalf("no %s.%s in %s", recv, name, pkg)
}

// enter records the file of fn and, the first time, walks its body with
// the variables that hold the walked value (mine: its parameters given
// it, then what the body makes from them).
func (w *walk) enter(fn *types.Func, fd *ast.FuncDecl, mine map[types.Object]bool) {
	w.stay(w.fileOf(fn))
	if w.seen[fn] || fd == nil || fd.Body == nil {
		return
	}
	w.seen[fn] = true
	info := w.info[fd]
	mentions := func(e ast.Node) bool {
		found := false
		ast.Inspect(e, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && mine[info.Uses[id]] {
				found = true
			}
			return !found
		})
		return found
	}
	take := func(lhs ...ast.Expr) {
		for _, l := range lhs {
			if id, ok := l.(*ast.Ident); ok {
				if o := info.ObjectOf(id); o != nil {
					mine[o] = true
				}
			}
		}
	}
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.AssignStmt:
			for _, r := range n.Rhs {
				if mentions(r) {
					take(n.Lhs...)
				}
			}
		case *ast.RangeStmt:
			if mentions(n.X) {
				take(n.Key, n.Value)
			}
		case *ast.ValueSpec:
			for _, v := range n.Values {
				if mentions(v) {
					for _, name := range n.Names {
						take(name)
					}
				}
			}
		case *ast.CallExpr:
			w.call(info, n, mentions)
		}
		return true
	})
}

// call enters the function a call calls when it is the module's and is
// given the walked value: in an argument, or in its receiver.
func (w *walk) call(info *types.Info, call *ast.CallExpr, mentions func(ast.Node) bool) {
	callee := calleeOf(info, call)
	if callee == nil || callee.Pkg() == nil || !strings.HasPrefix(callee.Pkg().Path()+"/", module) {
		return
	}
	given := map[int]bool{} // by parameter index; -1 is the receiver
	sig := callee.Type().(*types.Signature)
	for i, arg := range call.Args {
		if mentions(arg) && sig.Params().Len() > 0 {
			given[min(i, sig.Params().Len()-1)] = true
		}
	}
	if sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr); ok && sig.Recv() != nil && mentions(sel.X) {
		given[-1] = true
	}
	if len(given) == 0 {
		return
	}
	fd := w.byObj[callee]
	theirs := map[types.Object]bool{}
	if fd != nil {
		i := 0
		for _, field := range fd.Type.Params.List {
			for _, n := range field.Names {
				if given[i] {
					theirs[w.info[fd].Defs[n]] = true
				}
				i++
			}
		}
		if r := fd.Recv; given[-1] && r != nil && len(r.List) > 0 && len(r.List[0].Names) > 0 {
			theirs[w.info[fd].Defs[r.List[0].Names[0]]] = true
		}
	}
	w.enter(callee, fd, theirs)
}

// stay records being in file: a new stay when it is not the current one.
func (w *walk) stay(file string) {
	if n := len(w.stays); n > 0 && w.stays[n-1] == file {
		return
	}
	w.stays = append(w.stays, file)
	w.rooms[file] = true
}

// fileOf is the file that declares fn, as package-dir/file.go.
func (w *walk) fileOf(fn *types.Func) string {
	pos := w.fset.Position(fn.Pos())
	return filepath.Base(filepath.Dir(pos.Filename)) + "/" + filepath.Base(pos.Filename)
}

// calleeOf is the function or method a call calls; nil for a call of a
// function value, a conversion or a builtin.
func calleeOf(info *types.Info, call *ast.CallExpr) *types.Func {
	var id *ast.Ident
	switch fun := ast.Unparen(call.Fun).(type) {
	case *ast.Ident:
		id = fun
	case *ast.SelectorExpr:
		id = fun.Sel
	case *ast.IndexExpr: // a generic function, instantiated
		switch x := fun.X.(type) {
		case *ast.SelectorExpr:
			id = x.Sel
		case *ast.Ident:
			id = x
		}
	}
	if id == nil {
		return nil
	}
	fn, _ := info.Uses[id].(*types.Func)
	if fn != nil {
		fn = fn.Origin()
	}
	return fn
}
