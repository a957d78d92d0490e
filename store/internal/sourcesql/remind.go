package sourcesql

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Reminders (hourglass.Source.RemindBefore): a row's source.expiring is
// written in a transaction that locks the row (as a close does, skipping a
// row the shop holds), reads it through the source's pending condition and
// records the reminder in RemindersTable under (source, key, deadline):
// the primary key, not timing, makes a second attempt (a retry whose
// commit was not seen, a restart, another node after a partition moved)
// change nothing.

// RemindersTable is hourglass's table of settled source reminders
// (PostgreSQL's migration 0016, MySQL's 0017): one row per (source_name,
// deadline_ms, row_key), written in the transaction of the reminder's
// event, or of its skip.
const RemindersTable = "source_reminders"

// reminderColumns are RemindersTable's columns, in InsertNew's order.
var reminderColumns = []string{"source_name", "row_key", "deadline_ms"}

// Remind implements hourglass.SourceTable.
func (t *Table) Remind(ctx context.Context, rows []hourglass.DueItem) ([]hourglass.SourceReminded, error) {
	if t.src.RemindBefore <= 0 {
		return nil, fmt.Errorf("source %s: remind: the source has no remind_before", t.src.Name)
	}
	rows = slices.Clone(rows)
	slices.SortFunc(rows, func(a, b hourglass.DueItem) int { return cmp.Compare(a.ID, b.ID) })
	rows = slices.CompactFunc(rows, func(a, b hourglass.DueItem) bool { return a.ID == b.ID })
	if len(rows) == 0 {
		return nil, nil
	}
	var (
		res        []hourglass.SourceReminded
		deliveries int
		err        error
	)
	for attempt := 1; ; attempt++ {
		res, deliveries, err = t.remindTx(ctx, rows)
		if err == nil || !t.d.Aborts(err) && !errors.Is(err, errReminderRace) || attempt == closeAttempts || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("source %s: remind %d rows: %w", t.src.Name, len(rows), err)
	}
	t.d.Committed(deliveries)
	return res, nil
}

// remindTx is Remind's transaction: lock the rows the shop does not hold,
// read those still pending, read now, record each reminder due with its
// deadline unchanged (recordReminders), then write the events of those
// recorded for the first time whose deadline is ahead.
func (t *Table) remindTx(ctx context.Context, rows []hourglass.DueItem) (res []hourglass.SourceReminded, deliveries int, err error) {
	lead := t.src.RemindBefore
	err = t.d.InTx(ctx, WaitRow, func(tx Querier) error {
		res, deliveries = res[:0], 0
		keys := make([]any, len(rows))
		for i, r := range rows {
			keys[i] = r.ID
			d := hourglass.CeilMilli(r.At)
			res = append(res, hourglass.SourceReminded{Key: r.ID, Deadline: d, RemindAt: d.Add(-lead)})
		}
		locked, err := t.keys(ctx, tx, t.d.LockKeys(t.table, t.key, len(keys)), keys)
		if err != nil {
			return fmt.Errorf("lock the rows: %w", err)
		}
		// Read after the locks (both stores read committed): what the shop
		// committed before is seen, and nothing changes it until the commit.
		pending := map[int64]time.Time{}
		if len(locked) > 0 {
			ps := make([]string, 0, len(locked))
			args := make([]any, 0, len(locked))
			for _, r := range rows {
				if locked[r.ID] {
					ps, args = append(ps, t.d.Param(len(ps)+1)), append(args, r.ID)
				}
			}
			q := fmt.Sprintf("SELECT %s, %s FROM %s WHERE %s IN (%s) AND (%s) AND %s", t.key, t.deadline, t.table, t.key, strings.Join(ps, ", "), t.src.Pending, t.inRange)
			cur, err := t.scan(tx.Query(ctx, q, args...))
			if err != nil {
				return fmt.Errorf("read the rows: %w", err)
			}
			for _, c := range cur {
				pending[c.ID] = hourglass.CeilMilli(c.At)
			}
		}
		now, err := t.d.NowMs(ctx, tx)
		if err != nil {
			return fmt.Errorf("read now: %w", err)
		}
		var (
			marked []int // indexes in res of the reminders due with their deadline
			gone   []int // of those whose row is no longer pending
		)
		for i := range res {
			r := &res[i]
			cur, ok := pending[r.Key]
			switch {
			case !locked[r.Key]:
				r.Outcome = hourglass.SourceReminderBlocked
			case !ok:
				r.Outcome = hourglass.SourceReminderSkipped
				gone = append(gone, i)
			case !cur.Equal(r.Deadline):
				r.Outcome, r.Deadline, r.RemindAt = hourglass.SourceReminderMoved, cur, cur.Add(-lead)
			case hourglass.UnixMilli(r.RemindAt) > now:
				// Early by the database's clock: not yet (never early).
				r.Outcome = hourglass.SourceReminderNotDue
			default:
				marked = append(marked, i)
			}
		}
		if len(marked) == 0 && len(gone) == 0 {
			return nil
		}
		// A row gone is recorded too, so that its skip is counted once
		// whichever node comes second; one whose reminder was settled
		// already (sent by another node, or before a restart) is Done.
		fresh, err := t.recordReminders(ctx, tx, res, append(slices.Clone(gone), marked...))
		if err != nil {
			return err
		}
		for _, i := range gone {
			if !fresh[i] {
				res[i].Outcome = hourglass.SourceReminderDone
			}
		}
		sentAt := hourglass.FromUnixMilli(now)
		var evs []Event
		for _, i := range marked {
			r := &res[i]
			switch {
			case !fresh[i]:
				r.Outcome = hourglass.SourceReminderDone
			case hourglass.UnixMilli(r.Deadline) <= now:
				r.Outcome = hourglass.SourceReminderSkipped // recorded: counted once
			default:
				r.Outcome, r.SentAt = hourglass.SourceReminderSent, sentAt
				id := hourglass.NewEventID()
				evs = append(evs, Event{Type: hourglass.EventSourceExpiring, ID: id, OrderID: hourglass.SourceEventOrderID(t.src.Name, r.Key), At: now,
					Body: hourglass.MarshalSourceReminderEvent(id, t.src.Name, r.Key, sentAt, r.Deadline, r.RemindAt)})
			}
		}
		if len(evs) == 0 {
			return nil
		}
		if deliveries, err = t.d.WriteEvents(ctx, tx, evs); err != nil {
			return fmt.Errorf("write source.expiring events: %w", err)
		}
		return nil
	})
	return res, deliveries, err
}

// errReminderRace ends a reminder's transaction whose record another
// transaction committed between its read and its insert: run again, the
// read sees it.
var errReminderRace = errors.New("another transaction recorded one of the reminders meanwhile")

// recordReminders records the reminders res[i], i in idx, in
// RemindersTable and returns those this transaction recorded (by index in
// res; the others were recorded already), in two statements whatever
// their number: a read of those recorded, then one insert of the rest. An
// insert that finds one committed meanwhile is errReminderRace.
func (t *Table) recordReminders(ctx context.Context, tx Querier, res []hourglass.SourceReminded, idx []int) (fresh map[int]bool, err error) {
	type rec struct{ key, deadline int64 }
	args := []any{t.src.Name}
	var keys, deadlines []string
	seenDeadline := map[int64]bool{}
	for _, i := range idx {
		keys, args = append(keys, t.d.Param(len(args)+1)), append(args, res[i].Key)
	}
	for _, i := range idx {
		if d := hourglass.UnixMilli(res[i].Deadline); !seenDeadline[d] {
			seenDeadline[d] = true
			deadlines, args = append(deadlines, t.d.Param(len(args)+1)), append(args, d)
		}
	}
	// Params in the text's order (MySQL's are positional).
	rows, err := tx.Query(ctx, fmt.Sprintf("SELECT row_key, deadline_ms FROM %s WHERE source_name = %s AND row_key IN (%s) AND deadline_ms IN (%s)",
		RemindersTable, t.d.Param(1), strings.Join(keys, ", "), strings.Join(deadlines, ", ")), args...)
	if err != nil {
		return nil, fmt.Errorf("read the recorded reminders: %w", err)
	}
	found := map[rec]bool{}
	for rows.Next() {
		var r rec
		if err := rows.Scan(&r.key, &r.deadline); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the recorded reminders: %w", err)
		}
		found[r] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the recorded reminders: %w", err)
	}
	fresh = map[int]bool{}
	args = args[:0]
	for _, i := range idx {
		if r := (rec{res[i].Key, hourglass.UnixMilli(res[i].Deadline)}); !found[r] {
			fresh[i] = true
			args = append(args, t.src.Name, r.key, r.deadline)
		}
	}
	if len(fresh) == 0 {
		return fresh, nil
	}
	n, err := tx.Exec(ctx, t.d.InsertNew(RemindersTable, reminderColumns, len(fresh)), args...)
	if err != nil {
		return nil, fmt.Errorf("record the reminders: %w", err)
	}
	if n != int64(len(fresh)) {
		return nil, errReminderRace
	}
	return fresh, nil
}

// PruneReminders implements hourglass.SourceTable.
func (t *Table) PruneReminders(ctx context.Context, before time.Time, limit int) (int, error) {
	q := t.d.DeleteSome(RemindersTable, fmt.Sprintf("source_name = %s AND deadline_ms < %s", t.d.Param(1), t.d.Param(2)), max(limit, 1))
	n, err := t.d.DB().Exec(ctx, q, t.src.Name, hourglass.UnixMilli(before))
	if err != nil {
		return 0, fmt.Errorf("source %s: prune reminders: %w", t.src.Name, err)
	}
	return int(n), nil
}
