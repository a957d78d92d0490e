package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"testing"
)

// TestKillTestsListed: every test that skips itself with skipKillUnderRace
// matches killTests, the pattern .ci/run reads to run them without the
// race detector; one it missed would run nowhere.
func TestKillTestsListed(t *testing.T) {
	files, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	pattern := regexp.MustCompile(killTests)
	fset, found := token.NewFileSet(), 0
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil || fn.Name.Name == "skipKillUnderRace" {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if call, ok := n.(*ast.CallExpr); ok {
					if id, ok := call.Fun.(*ast.Ident); ok && id.Name == "skipKillUnderRace" {
						found++
						if !pattern.MatchString(fn.Name.Name) {
							t.Errorf("%s (%s) calls skipKillUnderRace but killTests (%s) does not match it", fn.Name.Name, name, killTests)
						}
					}
				}
				return true
			})
		}
	}
	if found == 0 {
		t.Error("no test calls skipKillUnderRace: this check looks in the wrong place")
	}
}
