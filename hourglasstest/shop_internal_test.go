package hourglasstest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestRetryDeadlock: the test shop's writes run again after the
// database's deadlock, wrapped or not, at most five times in all, and
// after no other error.
func TestRetryDeadlock(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		tries int
	}{
		{"mysql deadlock", fmt.Errorf("pay: %w", &mysql.MySQLError{Number: 1213}), 5},
		{"postgres deadlock", &pgconn.PgError{Code: "40P01"}, 5},
		{"mysql lock wait timeout", &mysql.MySQLError{Number: 1205}, 1},
		{"postgres serialization failure", &pgconn.PgError{Code: "40001"}, 1},
		{"another error", errors.New("connection refused"), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tries := 0
			err := retryDeadlock(func() error { tries++; return c.err })
			if tries != c.tries || !errors.Is(err, c.err) {
				t.Errorf("%d attempts, error %v; want %d and the attempt's error", tries, err, c.tries)
			}
		})
	}
	tries := 0
	err := retryDeadlock(func() error {
		if tries++; tries < 3 {
			return &mysql.MySQLError{Number: 1213}
		}
		return nil
	})
	if tries != 3 || err != nil {
		t.Errorf("a deadlock, a deadlock, then success: %d attempts, error %v; want 3 and nil", tries, err)
	}
}
