package sqlite

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
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

// Policy implements hourglass.Store; it returns a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var p hourglass.Policy
	if err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		p, err = s.loadPolicy(conn)
		return err
	}); err != nil {
		return p, err
	}
	p.Categories = maps.Clone(p.Categories) // the caller's to change
	return p, nil
}

// PutPolicy implements hourglass.Store.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	raw, err := stored.EncodePolicy(p)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		stmt := conn.Prep(`INSERT INTO settings (name, value) VALUES ('policy', ?1)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
		stmt.BindText(1, string(raw))
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: put policy: %w", err)
		}
		return nil
	})
}
