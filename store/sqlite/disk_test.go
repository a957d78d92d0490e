package sqlite_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/sqlite"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts it
// when the test ends; it skips the test where mounting is not permitted.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	if testing.Short() {
		t.Skip("mounts a tmpfs; skipped with -short")
	}
	dir := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return path
		}
	}
}

// TestDiskFull: on a full disk a write fails with unavailable and a message
// naming the cause (not a vague internal error), WriteHealth reports it, and
// both clear by themselves once space is freed, without any other write.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	dir := mountTmpfs(t, 4<<20)
	store, err := sqlite.Open(sqlite.Config{Dir: filepath.Join(dir, "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx := t.Context()
	if _, err := store.PutProduct(ctx, hourglass.Product{SKU: "before", Available: 1}); err != nil {
		t.Fatal(err)
	}
	if err := store.WriteHealth(); err != nil {
		t.Fatalf("WriteHealth before the disk is full: %v", err)
	}
	filler := fill(t, dir)

	var werr error
	for i := 0; i < 10000 && werr == nil; i++ {
		_, werr = store.PutProduct(ctx, hourglass.Product{SKU: fmt.Sprintf("full-%d", i), Name: strings.Repeat("n", 200), Available: 1})
	}
	if werr == nil {
		t.Fatal("10000 writes succeeded on a full disk")
	}
	if code := hourglass.ErrorCode(werr); code != hourglass.CodeUnavailable || !strings.Contains(hourglass.ErrorMessage(werr), "the disk is full") {
		t.Fatalf("write on a full disk: %v (code %s), want unavailable naming the full disk", werr, code)
	}
	if err := store.WriteHealth(); hourglass.ErrorCode(err) != hourglass.CodeUnavailable || !strings.Contains(err.Error(), "the disk is full") {
		t.Fatalf("WriteHealth on a full disk: %v", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 10*sqlite.ProbeInterval, "WriteHealth clear after space was freed", func() bool { return store.WriteHealth() == nil })

	if _, err := store.PutProduct(ctx, hourglass.Product{SKU: "after", Available: 1}); err != nil {
		t.Fatalf("write after space was freed: %v", err)
	}
}

// TestFilePermissions: the data directory is created 0700 and the database
// files 0600 (they hold webhook secrets); looser files are tightened; a data
// directory others can write is refused with a message saying what to do.
func TestFilePermissions(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	store, err := sqlite.Open(sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutProduct(t.Context(), hourglass.Product{SKU: "p", Available: 1}); err != nil {
		t.Fatal(err)
	}
	checkModes := func(when string) {
		t.Helper()
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: data dir: %v, %v; want mode 0700", when, fi.Mode(), err)
		}
		for _, name := range []string{"hourglass.db", "hourglass.db-wal", "hourglass.db-shm"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Errorf("%s: %s: %v", when, name, err)
				continue
			}
			if fi.Mode().Perm() != 0o600 {
				t.Errorf("%s: %s has mode %04o, want 0600", when, name, fi.Mode().Perm())
			}
		}
	}
	checkModes("created")
	store.Close()

	for _, name := range []string{"hourglass.db", "hourglass.db-wal", "hourglass.db-shm"} {
		os.Chmod(filepath.Join(dir, name), 0o644) // those that exist
	}
	store, err = sqlite.Open(sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.PutProduct(t.Context(), hourglass.Product{SKU: "q", Available: 1}); err != nil {
		t.Fatal(err)
	}
	checkModes("reopened after chmod 644")
	store.Close()

	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	_, err = sqlite.Open(sqlite.Config{Dir: dir})
	if err == nil || !strings.Contains(err.Error(), "writable by others") || !strings.Contains(err.Error(), "chmod 700") {
		t.Fatalf("open on a world-writable data dir: %v, want a refusal saying chmod 700", err)
	}
}
