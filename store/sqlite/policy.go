package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hourglass/hourglass"
	"zombiezen.com/go/sqlite"
)

// policyJSON is the stored form of hourglass.Policy, in milliseconds.
type policyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
}

func loadPolicy(conn *sqlite.Conn) (hourglass.Policy, error) {
	p := hourglass.Policy{DefaultTimeout: hourglass.DefaultTimeout, Categories: map[string]time.Duration{}}
	stmt := conn.Prep(`SELECT value FROM settings WHERE name = 'policy'`)
	var raw string
	found, err := step(stmt, func(st *sqlite.Stmt) { raw = st.ColumnText(0) })
	if err != nil {
		return p, fmt.Errorf("sqlite: load policy: %w", err)
	}
	if !found {
		return p, nil
	}
	var j policyJSON
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return p, fmt.Errorf("sqlite: decode stored policy: %w", err)
	}
	p.DefaultTimeout = time.Duration(j.DefaultTimeoutMs) * time.Millisecond
	for c, ms := range j.Categories {
		p.Categories[c] = time.Duration(ms) * time.Millisecond
	}
	return p, nil
}

// Policy implements hourglass.Store; it returns a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	p := *s.policy.Load()
	cats := make(map[string]time.Duration, len(p.Categories))
	for c, d := range p.Categories {
		cats[c] = d
	}
	p.Categories = cats
	return p, nil
}

// PutPolicy implements hourglass.Store.
func (s *Store) PutPolicy(ctx context.Context, p hourglass.Policy) error {
	if err := p.Validate(); err != nil {
		return err
	}
	j := policyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: map[string]int64{}}
	cats := make(map[string]time.Duration, len(p.Categories))
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
		cats[c] = d
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("sqlite: encode policy: %w", err)
	}
	stored := hourglass.Policy{DefaultTimeout: p.DefaultTimeout, Categories: cats}
	err = s.write(ctx, func(conn *sqlite.Conn, _ time.Time) error {
		stmt := conn.Prep(`INSERT INTO settings (name, value) VALUES ('policy', ?1)
ON CONFLICT (name) DO UPDATE SET value = excluded.value`)
		stmt.BindText(1, string(raw))
		if _, err := step(stmt, nil); err != nil {
			return fmt.Errorf("sqlite: put policy: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.policy.Store(&stored)
	return nil
}
