package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/store/internal/stored"
)

// Policy implements hourglass.Store: the policy as stored now, whichever
// process put it. It returns a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var raw string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'policy'`).Scan(&raw)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return hourglass.Policy{}, fail("get policy", err)
	}
	p, err := s.policy.Decode(raw)
	if err != nil {
		return p, err
	}
	p.Categories = maps.Clone(p.Categories)
	return p, nil
}

// PutPolicy implements hourglass.Store: one upsert, committed before it
// returns; every create whose batch starts after that uses it.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	raw, err := stored.EncodePolicy(p)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	return s.inTx(ctx, "put policy", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('policy', ?) ON DUPLICATE KEY UPDATE value = ?`, string(raw), string(raw))
		return err
	})
}
