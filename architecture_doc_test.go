package hourglass_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestArchitecturePageNamesEveryPackage fails when a package of the module
// (a directory with non-test Go files, outside the separate peers module
// and testdata) is not named in docs/architecture.md as `path`: the page
// is where the next engineer finds what each package owns.
func TestArchitecturePageNamesEveryPackage(t *testing.T) {
	page, err := os.ReadFile("docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	n := 0
	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || name == "testdata" || name == "peers" || name == "node_modules") {
			return filepath.SkipDir
		}
		if path == "." || !hasGoSource(t, path) {
			return nil
		}
		n++
		if !strings.Contains(string(page), "`"+filepath.ToSlash(path)+"`") {
			missing = append(missing, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 30 {
		t.Fatalf("found %d packages: is the walk broken?", n)
	}
	if len(missing) > 0 {
		t.Errorf("docs/architecture.md does not name these packages (in backticks): %s", strings.Join(missing, ", "))
	}
}

// hasGoSource reports whether dir holds a non-test Go file.
func hasGoSource(t *testing.T, dir string) bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
			return true
		}
	}
	return false
}
