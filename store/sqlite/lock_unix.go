//go:build unix

package sqlite

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock on path+"-lock" for as long as the store
// is open: one SQLite database file has one hourglass writer (the store's
// group commit and its cached policy and webhook count assume it), so a
// second store on the same file, in this process or another, is refused.
// The kernel drops the lock when the process dies, so a crash never leaves
// it behind. It returns the file to close on Close.
func lockFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path+"-lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open lock file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sqlite: %s is in use by another hourglass process (or store); a SQLite database has one process: stop the other one, or use PostgreSQL or MySQL to run several", path)
		}
		return nil, fmt.Errorf("sqlite: lock %s: %w", path, err)
	}
	return f, nil
}
