package controllers

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestReconcileStaysThin keeps the controller's shape: Reconcile reads as
// get, derive, decide, act, patch (at most 60 lines), and no function in
// the package grows past 80 lines, so each can be read at once.
func TestReconcileStaysThin(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	seen := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok {
				continue
			}
			seen++
			lines := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			limit := 80
			if fd.Name.Name == "Reconcile" {
				limit = 60
			}
			if lines > limit {
				t.Errorf("%s: %s is %d lines, over %d", name, fd.Name.Name, lines, limit)
			}
		}
	}
	if seen < 50 {
		t.Fatalf("only %d functions found; the test is not reading the package", seen)
	}
}
