//go:build !unix

package sqlite

import "os"

// lockFile does nothing where flock is missing: there, keeping one process
// per database file is the operator's job.
func lockFile(string) (*os.File, error) { return nil, nil }
