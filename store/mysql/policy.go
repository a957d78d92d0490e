package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// policyJSON is the stored form of hourglass.Policy, in milliseconds (the
// same text as store/sqlite's).
type policyJSON struct {
	DefaultTimeoutMs int64            `json:"default_timeout_ms"`
	Categories       map[string]int64 `json:"categories"`
}

// policyCache decodes the stored policy text only when it changed: every
// batch re-reads the text inside its transaction (another process may have
// put a new policy), and this makes the re-read cheap. Safe for concurrent
// use.
type policyCache struct {
	mu     sync.Mutex
	raw    string
	policy hourglass.Policy
	ok     bool
}

// decode returns the policy of raw ("" when none is stored: the default).
// The result is shared: callers must not modify its Categories.
func (c *policyCache) decode(raw string) (hourglass.Policy, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok && c.raw == raw {
		return c.policy, nil
	}
	p, err := decodePolicy(raw)
	if err != nil {
		return p, err
	}
	c.raw, c.policy, c.ok = raw, p, true
	return p, nil
}

func decodePolicy(raw string) (hourglass.Policy, error) {
	p := hourglass.Policy{DefaultTimeout: hourglass.DefaultTimeout, Categories: map[string]time.Duration{}}
	if raw == "" {
		return p, nil
	}
	var j policyJSON
	if err := json.Unmarshal([]byte(raw), &j); err != nil {
		return p, fmt.Errorf("mysql: decode stored policy: %w", err)
	}
	p.DefaultTimeout = time.Duration(j.DefaultTimeoutMs) * time.Millisecond
	for c, ms := range j.Categories {
		p.Categories[c] = time.Duration(ms) * time.Millisecond
	}
	return p, nil
}

// Policy implements hourglass.Store: the policy as stored now, whichever
// process put it. It returns a copy.
func (s *Store) Policy(ctx context.Context) (hourglass.Policy, error) {
	var raw string
	err := s.db.QueryRowContext(ctx, `SELECT value FROM settings WHERE name = 'policy'`).Scan(&raw)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return hourglass.Policy{}, fail("get policy", err)
	}
	p, err := s.policy.decode(raw)
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
	j := policyJSON{DefaultTimeoutMs: p.DefaultTimeout.Milliseconds(), Categories: map[string]int64{}}
	for c, d := range p.Categories {
		j.Categories[c] = d.Milliseconds()
	}
	raw, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("mysql: encode policy: %w", err)
	}
	return s.inTx(ctx, "put policy", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO settings (name, value) VALUES ('policy', ?) ON DUPLICATE KEY UPDATE value = ?`, string(raw), string(raw))
		return err
	})
}
