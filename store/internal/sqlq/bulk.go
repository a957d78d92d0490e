package sqlq

import (
	"context"
	"time"

	"github.com/hourglass/hourglass"
)

// Bulk actions (hourglass.BulkStore): the bulk_actions table (migration
// 0015 on SQLite and MySQL, 0014 on PostgreSQL). A running action's row
// carries the runner's lease (owner, lease_until) and its progress
// (resume_at, matched, done, failed); every change of it is one
// conditional UPDATE, and a page of items commits with its progress in one
// transaction (CheckBulkLeaseIn, then the items, then WriteBulkProgressIn),
// so a node taking an action over resumes exactly after the last page that
// committed. running_key is unique and set only while the action runs:
// the same filter and action cannot run twice at once.

const bulkColumns = `id, kind, reason, spec, running_key, rate, state, matched, done, failed, resume_at, owner, lease_until, last_error, created_at, updated_at, finished_at`

// scanBulk returns the destinations of bulkColumns and a func that
// finishes a from them.
func scanBulk(a *hourglass.BulkAction) ([]any, func()) {
	var (
		kind, state, spec      string
		runningKey, owner      *string
		leaseUntil, finishedAt *int64
		createdAt, updatedAt   int64
	)
	return []any{&a.ID, &kind, &a.Reason, &spec, &runningKey, &a.Rate, &state, &a.Matched, &a.Done, &a.Failed, &a.Cursor, &owner, &leaseUntil, &a.Error, &createdAt, &updatedAt, &finishedAt}, func() {
		a.Action, a.State, a.Spec = hourglass.BulkActionKind(kind), hourglass.BulkState(state), []byte(spec)
		a.RunningKey, a.Owner = deref(runningKey), deref(owner)
		a.CreatedAt, a.UpdatedAt = hourglass.FromUnixMilli(createdAt), hourglass.FromUnixMilli(updatedAt)
		a.LeaseUntil, a.FinishedAt = optMs(leaseUntil), optMs(finishedAt)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func optMs(ms *int64) time.Time {
	if ms == nil {
		return time.Time{}
	}
	return hourglass.FromUnixMilli(*ms)
}

// forUpdate is the row lock of a SELECT in a write, none for a store with
// one writer (SQLite).
func (s *Store) forUpdate() string {
	if s.d.OneWriter {
		return ""
	}
	return ` FOR UPDATE`
}

func (s *Store) bulkByID(ctx context.Context, x q, id string) (hourglass.BulkAction, bool, error) {
	var a hourglass.BulkAction
	dest, done := scanBulk(&a)
	found, err := x.row(ctx, `SELECT `+bulkColumns+` FROM bulk_actions WHERE id = ?`, []any{id}, dest...)
	if found {
		done()
	}
	return a, found, err
}

// CreateBulkAction implements hourglass.BulkStore: the running action
// with a's RunningKey if there is one, else a new row if fewer than
// hourglass.MaxBulkRunning run. Two creates racing the same key: the
// second insert fails on the unique running_key, and the running one is
// read and returned.
func (s *Store) CreateBulkAction(ctx context.Context, a hourglass.BulkAction) (hourglass.BulkAction, bool, error) {
	var (
		out     hourglass.BulkAction
		created bool
	)
	running := func(x q) (bool, error) {
		dest, done := scanBulk(&out)
		found, err := x.row(ctx, `SELECT `+bulkColumns+` FROM bulk_actions WHERE running_key = ?`, []any{a.RunningKey}, dest...)
		if found {
			done()
		}
		return found, err
	}
	err := s.write(ctx, "create bulk action", Normal, func(x q) error {
		created = false
		// The running rows, locked first: two creates racing near the
		// limit count one after the other (and, on MySQL, this locking
		// read comes before any snapshot the transaction reads in).
		n := 0
		var id string
		if err := x.each(ctx, `SELECT id FROM bulk_actions WHERE state = 'running'`+s.forUpdate(), nil, []any{&id}, func() error {
			n++
			return nil
		}); err != nil {
			return err
		}
		if found, err := running(x); err != nil || found {
			return err
		}
		if n >= hourglass.MaxBulkRunning {
			return hourglass.Errorf(hourglass.CodeTooManyBulkActions, "%d bulk actions run already (at most %d at once): wait for one to finish or stop one", n, hourglass.MaxBulkRunning)
		}
		now, err := s.now(ctx, x)
		if err != nil {
			return err
		}
		if _, err := x.exec(ctx, `INSERT INTO bulk_actions (`+bulkColumns+`)
VALUES (?, ?, ?, ?, ?, ?, 'running', 0, 0, 0, '', NULL, NULL, '', ?, ?, NULL)`,
			a.ID, string(a.Action), a.Reason, string(a.Spec), a.RunningKey, a.Rate, now, now); err != nil {
			return err
		}
		out, created = a, true
		out.State, out.CreatedAt, out.UpdatedAt = hourglass.BulkRunning, hourglass.FromUnixMilli(now), hourglass.FromUnixMilli(now)
		return nil
	})
	if err != nil && hourglass.ErrorCode(err) == hourglass.CodeInternal {
		// Lost a race on running_key: the winner's action is the answer.
		if rerr := s.read(ctx, "read bulk action", func(x q) error {
			found, err := running(x)
			if err == nil && !found {
				return errNotRunning
			}
			return err
		}); rerr == nil {
			return out, false, nil
		}
	}
	return out, created, err
}

var errNotRunning = hourglass.Errorf(hourglass.CodeNotFound, "no such running bulk action")

// BulkAction implements hourglass.BulkStore.
func (s *Store) BulkAction(ctx context.Context, id string) (hourglass.BulkAction, error) {
	var (
		a     hourglass.BulkAction
		found bool
	)
	err := s.read(ctx, "read bulk action", func(x q) (err error) {
		a, found, err = s.bulkByID(ctx, x, id)
		return err
	})
	if err == nil && !found {
		err = hourglass.Errorf(hourglass.CodeNotFound, "bulk action %q not found", id)
	}
	return a, err
}

// BulkActions implements hourglass.BulkStore along the primary key.
func (s *Store) BulkActions(ctx context.Context, before string, limit int) ([]hourglass.BulkAction, error) {
	var out []hourglass.BulkAction
	if limit < 1 {
		return nil, nil
	}
	err := s.read(ctx, "list bulk actions", func(x q) error {
		out = out[:0]
		where, args := ``, []any{}
		if before != "" {
			where, args = ` WHERE id < ?`, append(args, before)
		}
		var a hourglass.BulkAction
		dest, done := scanBulk(&a)
		return x.each(ctx, `SELECT `+bulkColumns+` FROM bulk_actions`+where+` ORDER BY id DESC LIMIT ?`, append(args, limit), dest, func() error {
			done()
			out = append(out, a)
			return nil
		})
	})
	return out, err
}

// ClaimBulkAction implements hourglass.BulkStore: the oldest running
// action whose lease expired is read, then taken by a compare-and-set on
// its owner and lease, so two nodes racing for it cannot both win (the
// loser finds none this time and looks again at its next poll).
func (s *Store) ClaimBulkAction(ctx context.Context, owner string, lease time.Duration) (hourglass.BulkAction, bool, error) {
	var (
		a  hourglass.BulkAction
		ok bool
	)
	// Most looks find nothing to claim: a read first, no write
	// transaction every second on every node.
	const free = `state = 'running' AND (lease_until IS NULL OR lease_until < ?)`
	var (
		id    string
		found bool
	)
	if err := s.read(ctx, "look for a bulk action", func(x q) error {
		now, err := s.now(ctx, x)
		if err != nil {
			return err
		}
		found, err = x.row(ctx, `SELECT id FROM bulk_actions WHERE `+free+` ORDER BY id LIMIT 1`, []any{now}, &id)
		return err
	}); err != nil || !found {
		return a, false, err
	}
	err := s.write(ctx, "claim bulk action", Normal, func(x q) error {
		ok = false
		now, err := s.now(ctx, x)
		if err != nil {
			return err
		}
		n, err := x.exec(ctx, `UPDATE bulk_actions SET owner = ?, lease_until = ?, updated_at = ?
WHERE id = ? AND `+free, owner, now+lease.Milliseconds(), now, id, now)
		if err != nil || n == 0 {
			return err
		}
		a, ok, err = s.bulkByID(ctx, x, id)
		return err
	})
	return a, ok, err
}

// StopBulkAction implements hourglass.BulkStore: one conditional UPDATE;
// the runner's next page finds the action stopped and writes nothing.
func (s *Store) StopBulkAction(ctx context.Context, id string) (hourglass.BulkAction, error) {
	var (
		a     hourglass.BulkAction
		found bool
	)
	err := s.write(ctx, "stop bulk action", Normal, func(x q) error {
		now, err := s.now(ctx, x)
		if err != nil {
			return err
		}
		if _, err := x.exec(ctx, `UPDATE bulk_actions SET state = 'stopped', running_key = NULL, owner = NULL, lease_until = NULL,
updated_at = ?, finished_at = ? WHERE id = ? AND state = 'running'`, now, now, id); err != nil {
			return err
		}
		a, found, err = s.bulkByID(ctx, x, id)
		return err
	})
	if err == nil && !found {
		err = hourglass.Errorf(hourglass.CodeNotFound, "bulk action %q not found", id)
	}
	return a, err
}

// ReleaseBulkAction implements hourglass.BulkStore: one conditional
// UPDATE clearing owner's lease.
func (s *Store) ReleaseBulkAction(ctx context.Context, id, owner string) error {
	return s.write(ctx, "release bulk action", Normal, func(x q) error {
		_, err := x.exec(ctx, `UPDATE bulk_actions SET owner = NULL, lease_until = NULL WHERE id = ? AND owner = ? AND state = 'running'`, id, owner)
		return err
	})
}

// PruneBulkActions implements hourglass.BulkStore along
// bulk_actions_finished.
func (s *Store) PruneBulkActions(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	return s.prune(ctx, "prune bulk actions",
		s.deleteSome("bulk_actions", "id", "bulk_actions_finished", `finished_at < ?`, ""),
		hourglass.UnixMilli(before), limit)
}

// CheckBulkLeaseIn checks, in the transaction x and before it writes
// anything, that p.Owner runs the action p.ID (locking its row where the
// store has several writers): bulk_lease_lost otherwise.
func (s *Store) CheckBulkLeaseIn(ctx context.Context, x Querier, p *hourglass.BulkProgress) error {
	var state string
	var owner *string
	found, err := s.wrap(x).row(ctx, `SELECT state, owner FROM bulk_actions WHERE id = ?`+s.forUpdate(), []any{p.ID}, &state, &owner)
	if err != nil {
		return err
	}
	if !found || state != string(hourglass.BulkRunning) || deref(owner) != p.Owner {
		return hourglass.Errorf(hourglass.CodeBulkLeaseLost, "bulk action %q: not running under %q", p.ID, p.Owner)
	}
	return nil
}

// WriteBulkProgressIn writes p in the transaction x, after the page's
// items: the cursor, the counts added, the lease renewed, and the end
// state when p.Finish is set.
func (s *Store) WriteBulkProgressIn(ctx context.Context, x Querier, p *hourglass.BulkProgress) error {
	w := s.wrap(x)
	now, err := s.now(ctx, w)
	if err != nil {
		return err
	}
	set := `resume_at = ?, matched = matched + ?, done = done + ?, failed = failed + ?, updated_at = ?`
	args := []any{p.Cursor, p.Matched, p.Done, p.Failed, now}
	if p.Finish != "" {
		set += `, state = ?, last_error = ?, running_key = NULL, owner = NULL, lease_until = NULL, finished_at = ?`
		args = append(args, string(p.Finish), p.Error, now)
	} else {
		set += `, lease_until = ?`
		args = append(args, now+p.Lease.Milliseconds())
	}
	// CheckBulkLeaseIn holds the row (or the store's one writer does): the
	// conditions cannot fail here, and MySQL counts only changed rows.
	_, err = w.exec(ctx, `UPDATE bulk_actions SET `+set+` WHERE id = ? AND owner = ? AND state = 'running'`, append(args, p.ID, p.Owner)...)
	return err
}

// ApplyDeadLettersIn retries or deletes the dead letters of items (their
// other kinds are left alone) in the transaction x, each refused alone
// (not_found: not a dead letter), setting res[i].
func (s *Store) ApplyDeadLettersIn(ctx context.Context, x Querier, items []hourglass.BulkItem, res []hourglass.BulkItemResult) error {
	w := s.wrap(x)
	for i, it := range items {
		var err error
		switch it.Kind {
		case hourglass.BulkItemRetryDeadLetter:
			res[i].Retried, err = s.retryDeadLetterIn(ctx, w, it.ID)
		case hourglass.BulkItemDeleteDeadLetter:
			res[i].DeadLetter, err = s.deleteDeadLetterIn(ctx, w, it.ID)
		default:
			continue
		}
		if hourglass.ErrorCode(err) == hourglass.CodeNotFound {
			res[i].Err = err
			continue
		}
		if err != nil {
			return err
		}
		res[i].Changed = true
	}
	return nil
}
