package sqlite

import (
	"fmt"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

// loadPolicy reads the stored policy on conn. Its result is shared: callers
// must not modify its Categories.
func (s *Store) loadPolicy(conn *sqlite.Conn) (hourglass.Policy, error) {
	stmt := conn.Prep(`SELECT value FROM settings WHERE name = 'policy'`)
	var raw string
	if _, err := step(stmt, func(st *sqlite.Stmt) { raw = st.ColumnText(0) }); err != nil {
		return hourglass.Policy{}, fmt.Errorf("sqlite: load policy: %w", err)
	}
	p, err := s.policy.Decode(raw)
	if err != nil {
		return p, fmt.Errorf("sqlite: %w", err)
	}
	return p, nil
}
