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

// cachedPolicy is the policy decoded from one stored text, so that a create
// re-reads the stored row (another store value may have changed it) but
// decodes it only when it changed.
type cachedPolicy struct {
	raw    string
	policy hourglass.Policy
}

// loadPolicy reads the stored policy on conn. Its result is shared: callers
// must not modify its Categories.
func (s *Store) loadPolicy(conn *sqlite.Conn) (hourglass.Policy, error) {
	stmt := conn.Prep(`SELECT value FROM settings WHERE name = 'policy'`)
	var raw string
	if _, err := step(stmt, func(st *sqlite.Stmt) { raw = st.ColumnText(0) }); err != nil {
		return hourglass.Policy{}, fmt.Errorf("sqlite: load policy: %w", err)
	}
	if c := s.policy.Load(); c != nil && c.raw == raw {
		return c.policy, nil
	}
	p, err := decodePolicy(raw)
	if err != nil {
		return p, err
	}
	s.policy.Store(&cachedPolicy{raw: raw, policy: p})
	return p, nil
}

// decodePolicy decodes a stored policy; "" (none stored) is the default.
func decodePolicy(raw string) (hourglass.Policy, error) {
	p := hourglass.Policy{DefaultTimeout: hourglass.DefaultTimeout, Categories: map[string]time.Duration{}}
	if raw == "" {
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
	var p hourglass.Policy
	if err := s.read(ctx, func(conn *sqlite.Conn) error {
		var err error
		p, err = s.loadPolicy(conn)
		return err
	}); err != nil {
		return p, err
	}
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
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("sqlite: encode policy: %w", err)
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
