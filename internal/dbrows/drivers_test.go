package dbrows_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestDriversWriteNoRowLoop: the drivers read every result through this
// package, so no loop of theirs can forget the error that ended a result
// (issue 21): a call of Next on anything in their non-test files fails.
func TestDriversWriteNoRowLoop(t *testing.T) {
	checked := 0
	for _, dir := range []string{"../../twicepg", "../../twicesqlite", "../../twicemysql"} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range files {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok {
					return true
				}
				if sel, ok := call.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Next" && len(call.Args) == 0 {
					t.Errorf("%s: a hand-written loop over a result: read it with dbrows.Iter or dbrows.Collect", fset.Position(call.Pos()))
				}
				return true
			})
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d driver files: the paths above are wrong", checked)
	}
}
