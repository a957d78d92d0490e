package processtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hourglass/hourglass/internal/testenv"
)

// The binary every test runs, built once per test process into binDir
// (TestMain removes it) by the first test that asks for it.
var (
	binDir    string
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hourglass-processtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// binary returns the path of the hourglass binary (built without the race
// detector, whatever this test runs with). It skips t when the run does
// not cover the Default tier and t stated no other (testenv.RequireDefault),
// and under -short.
func binary(t testing.TB) string {
	t.Helper()
	testenv.RequireDefault(t)
	buildOnce.Do(func() {
		binPath = filepath.Join(binDir, "hourglass")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/hourglass/hourglass/cmd/hourglass").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// repoFile returns the path of a file of the repository, given from its
// root (this package is cmd/hourglass/processtest).
func repoFile(elem ...string) string {
	return filepath.Join(append([]string{"..", "..", ".."}, elem...)...)
}
