package store

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// addingAStorePage is the page that walks a new store through the contract.
const addingAStorePage = "../docs/adding-a-store.md"

// storeContract names the interfaces (and struct) docs/adding-a-store.md
// lists method by method, by the directory of their package.
var storeContract = map[string][]string{
	"internal/batch":     {"Tx"},
	"internal/sourcesql": {"Dialect", "Pipeliner"},
	"internal/sqlq":      {"Dialect", "DB", "Autocommitter", "Inserter"},
	// The root package's: Database, the interfaces it embeds (read from
	// the code, so one added to Database is checked at once) and the
	// optional abilities.
	"..": {"Database", "ClusterStore", "SourceStore"},
}

// TestAddingAStorePageListsTheContract fails when docs/adding-a-store.md
// falls behind the code: every method of the store contract's interfaces
// (and every field of sqlq.Dialect) must appear on it in backticks.
func TestAddingAStorePageListsTheContract(t *testing.T) {
	page, err := os.ReadFile(addingAStorePage)
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	for dir, types := range storeContract {
		if dir == ".." {
			types = append(slices.Clone(types), embeddedIn(t, dir, "Database")...)
		}
		names := contractNames(t, dir, types)
		if len(names) == 0 {
			t.Fatalf("%s: no methods found for %v: did the types move?", dir, types)
		}
		if missing := missingFromPage(string(page), names); len(missing) > 0 {
			t.Errorf("%s is missing, in backticks, these names of %s %v: %s",
				addingAStorePage, dir, types, strings.Join(missing, ", "))
		}
	}
}

// TestAddingAStorePageCheckFails shows the check above can fail: the page
// with one of batch.Tx's methods taken out misses it.
func TestAddingAStorePageCheckFails(t *testing.T) {
	page, err := os.ReadFile(addingAStorePage)
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	names := contractNames(t, "internal/batch", []string{"Tx"})
	cut := strings.ReplaceAll(string(page), "`LockTimerIDs`", "LockTimerIDs")
	missing := missingFromPage(cut, names)
	if len(missing) != 1 || missing[0] != "LockTimerIDs" {
		t.Fatalf("with LockTimerIDs taken off the page, missing = %v, want [LockTimerIDs]", missing)
	}
}

// contractNames parses the non-test Go files of dir and returns the
// methods (interfaces, embedded ones left to their own entry) and fields
// (structs) of the named types, sorted. A type not found fails t.
func contractNames(t *testing.T, dir string, types []string) []string {
	t.Helper()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, ty := range types {
		want[ty] = true
	}
	found := map[string]bool{}
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || !want[ts.Name.Name] {
				return true
			}
			found[ts.Name.Name] = true
			var fields *ast.FieldList
			switch ty := ts.Type.(type) {
			case *ast.InterfaceType:
				fields = ty.Methods
			case *ast.StructType:
				fields = ty.Fields
			}
			if fields == nil {
				return false
			}
			for _, fld := range fields.List {
				for _, id := range fld.Names {
					if id.IsExported() {
						names = append(names, id.Name)
					}
				}
			}
			return false
		})
	}
	for _, ty := range types {
		if !found[ty] {
			t.Fatalf("type %s not found in %s", ty, dir)
		}
	}
	sort.Strings(names)
	return names
}

// missingFromPage returns the names that do not appear on page as `name`.
func missingFromPage(page string, names []string) []string {
	var missing []string
	for _, n := range names {
		if !strings.Contains(page, "`"+n+"`") {
			missing = append(missing, n)
		}
	}
	return missing
}

// embeddedIn returns the interfaces the interface typ of dir's non-test Go
// files embeds by name (those of its own package). None found fails t.
func embeddedIn(t *testing.T, dir, typ string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", file, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != typ {
				return true
			}
			if it, ok := ts.Type.(*ast.InterfaceType); ok {
				for _, fld := range it.Methods.List {
					if id, ok := fld.Type.(*ast.Ident); ok && len(fld.Names) == 0 {
						names = append(names, id.Name)
					}
				}
			}
			return false
		})
	}
	if len(names) == 0 {
		t.Fatalf("%s embeds no interface in %s: did it move?", typ, dir)
	}
	return names
}
