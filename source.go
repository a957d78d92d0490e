package hourglass

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Sources: hourglass closes the rows of a shop's own table at their
// deadline (--sources). The table lives in hourglass's database (the same
// PostgreSQL database in another schema, or another database of the same
// MySQL server); the shop's order service writes it as it always has, and
// hourglass finds its pending rows through the shop's index, times them in
// memory like its own orders, and at each deadline runs the source's close
// statements in one transaction with its source.closed event. The first
// close statement is the guard: the rest, and the event, run only when it
// changed exactly one row.

// Limits on a Source, enforced by Validate.
const (
	MaxSources          = 32
	MaxSourceStatements = 16
	MaxSourceSQL        = 8 << 10
	// MaxSourceLockStatements bounds a source's lock statements.
	MaxSourceLockStatements = 4
)

// Source is one table of a shop's whose rows hourglass closes, as the
// --sources file gives it.
type Source struct {
	// Name names the source in events, metrics and logs: 1-64 of a-z0-9_.
	Name string
	// Table is the table as the database names it: "schema.table" or
	// "table" (hourglass's own schema or database).
	Table string
	// Key is a unique BIGINT column; new rows get increasing keys.
	Key string
	// Deadline is a TIMESTAMP/DATETIME column in UTC, or a BIGINT of unix
	// milliseconds when DeadlineUnit is "ms".
	Deadline     string
	DeadlineUnit string
	// Pending is an SQL condition on the row, true while it waits for its
	// deadline.
	Pending string
	// Close are the statements of the close's transaction; ":key" binds
	// the row's key. Close[0] is the guard.
	Close []string
	// Lock, optional, are statements run once in each close transaction,
	// after the guards and before Close[1:], with ":keys" bound to the
	// keys of the rows closing in it (a list: "IN (:keys)"). They lock, in
	// one fixed order, the rows that several rows' statements change (a
	// hot SKU's stock), so that a batch takes those locks in the order the
	// shop's own transactions do rather than row by row.
	Lock []string
	// BeforeClose, when set, is asked before each close (package
	// beforeclose); BeforeCloseOnError is "wait" (the default: the row
	// stays pending while the check fails) or "close" (close after
	// BeforeCloseMaxFailures failures in a row).
	BeforeClose            string
	BeforeCloseOnError     string
	BeforeCloseMaxFailures int
	// RemindBefore, when positive, is the lead of the rows' reminders: a
	// pending row gets one source.expiring event at its deadline minus
	// RemindBefore (0: none). Whole milliseconds, 1s to
	// MaxSourceRemindBefore.
	RemindBefore time.Duration
}

// MaxSourceRemindBefore bounds Source.RemindBefore (the longest order
// timeout, MaxTimeout, as an order's reminder lead).
const MaxSourceRemindBefore = MaxTimeout

var (
	sourceNameRE = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)
	identRE      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,63}$`)
)

// Schema and name of s.Table (schema "" when the table is unqualified).
func (s Source) SchemaTable() (schema, table string) {
	if i := strings.IndexByte(s.Table, '.'); i >= 0 {
		return s.Table[:i], s.Table[i+1:]
	}
	return "", s.Table
}

// Validate checks s on its own (Sources.Validate checks the set); the
// database checks the rest when the source is opened. Errors name the
// source and the key.
func (s Source) Validate() error {
	bad := func(key, format string, args ...any) error {
		name := s.Name
		if name == "" {
			name = "(unnamed)"
		}
		return Errorf(CodeInvalidArgument, "source %s: %s: %s", name, key, fmt.Sprintf(format, args...))
	}
	if !sourceNameRE.MatchString(s.Name) {
		return bad("name", "%q must be 1-64 characters of a-z, 0-9 and _", s.Name)
	}
	schema, table := s.SchemaTable()
	if !identRE.MatchString(table) || (strings.Contains(s.Table, ".") && !identRE.MatchString(schema)) {
		return bad("table", "%q must be a table or schema.table of letters, digits, _ and $", s.Table)
	}
	for _, c := range []struct{ key, v string }{{"key", s.Key}, {"deadline", s.Deadline}} {
		if !identRE.MatchString(c.v) {
			return bad(c.key, "%q must be a column name of letters, digits, _ and $", c.v)
		}
	}
	if s.Key == s.Deadline {
		return bad("deadline", "is the key column %q", s.Key)
	}
	if s.DeadlineUnit != "" && s.DeadlineUnit != "ms" {
		return bad("deadline_unit", "%q: leave it out for a TIMESTAMP/DATETIME column, or ms for a BIGINT of unix milliseconds", s.DeadlineUnit)
	}
	if err := checkSQLText(s.Pending); err != nil {
		return bad("pending", "%v", err)
	}
	if strings.Contains(s.Pending, ":key") {
		return bad("pending", "is a condition on every row; it cannot bind :key")
	}
	if len(s.Close) == 0 || len(s.Close) > MaxSourceStatements {
		return bad("close", "give 1 to %d statements, the first the guard; got %d", MaxSourceStatements, len(s.Close))
	}
	for i, st := range s.Close {
		if err := checkSQLText(st); err != nil {
			return bad(fmt.Sprintf("close[%d]", i), "%v", err)
		}
	}
	if n := len(BindKey(s.Close[0], func(int) string { return "?" }).Params); n == 0 {
		return bad("close[0]", "the guard must bind the row's key with :key (e.g. WHERE %s = :key AND …)", s.Key)
	}
	if len(s.Lock) > MaxSourceLockStatements {
		return bad("lock", "give at most %d statements; got %d", MaxSourceLockStatements, len(s.Lock))
	}
	for i, st := range s.Lock {
		key := fmt.Sprintf("lock[%d]", i)
		if err := checkSQLText(st); err != nil {
			return bad(key, "%v", err)
		}
		if _, n := BindKeys(st, 1, func(int) string { return "?" }); n == 0 {
			return bad(key, "must bind the closing rows' keys with :keys (e.g. WHERE order_id IN (:keys))")
		}
		if len(BindKey(st, func(int) string { return "?" }).Params) > 0 {
			return bad(key, "runs once for the whole batch: bind :keys (the list of keys), not :key")
		}
	}
	if s.BeforeClose != "" {
		u, err := url.Parse(s.BeforeClose)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			// Not echoed: it may hold a password or a token.
			return bad("before_close", "must be an absolute http or https URL with a host (http://host:port/path)")
		}
	}
	switch s.BeforeCloseOnError {
	case "", "wait", "close":
	default:
		return bad("before_close_on_error", "%q: want wait (the row stays pending while the check fails) or close", s.BeforeCloseOnError)
	}
	if s.BeforeCloseMaxFailures < 0 || s.BeforeCloseMaxFailures > 1000 {
		return bad("before_close_max_failures", "must be 1 to 1000, got %d", s.BeforeCloseMaxFailures)
	}
	if s.BeforeClose == "" && (s.BeforeCloseOnError != "" || s.BeforeCloseMaxFailures != 0) {
		return bad("before_close_on_error", "applies only with before_close")
	}
	if d := s.RemindBefore; d != 0 && (d < MinTimeout || d > MaxSourceRemindBefore || d%time.Millisecond != 0) {
		return bad("remind_before", "must be 0 or absent (no reminder), or whole milliseconds from %s to %s (7 days), got %s", MinTimeout, MaxSourceRemindBefore, d)
	}
	return nil
}

// checkSQLText refuses an empty or oversized statement, and one that
// holds a second statement (a ";" outside quotes and comments: the
// drivers would refuse it anyway, less clearly).
func checkSQLText(q string) error {
	q = strings.TrimSpace(q)
	if q == "" {
		return fmt.Errorf("empty")
	}
	if len(q) > MaxSourceSQL {
		return fmt.Errorf("%d bytes; at most %d", len(q), MaxSourceSQL)
	}
	var quotes quoteState
	for i := 0; i < len(q); i++ {
		c := q[i]
		if !quotes.outside(c) {
			continue
		}
		switch {
		case c == ';':
			return fmt.Errorf("one statement without \";\", please")
		case c == '-' && i+1 < len(q) && q[i+1] == '-', c == '/' && i+1 < len(q) && q[i+1] == '*':
			return fmt.Errorf("no comments, please (they could hide a :key or a quote)")
		}
	}
	if quotes.quote != 0 {
		return fmt.Errorf("an unterminated quote %c", quotes.quote)
	}
	return nil
}

// quoteState follows SQL text byte by byte: inside '…', "…" or `…`, or
// not.
type quoteState struct{ quote byte }

// outside reports whether c stands outside every quote (a quote mark
// itself does not), and moves the state past it.
func (s *quoteState) outside(c byte) bool {
	switch {
	case s.quote != 0:
		if c == s.quote {
			s.quote = 0
		}
		return false
	case c == '\'' || c == '"' || c == '`':
		s.quote = c
		return false
	}
	return true
}

// BoundSQL is a statement with its :key placeholders rendered for a
// driver: Params holds, for each placeholder in order, the index of the
// argument it binds (always 0, the key).
type BoundSQL struct {
	SQL    string
	Params []int
}

// BindKey replaces each :key outside quotes with param(n) (n from 1), the
// driver's n-th placeholder ("$1", "?").
func BindKey(q string, param func(n int) string) BoundSQL {
	var out BoundSQL
	out.SQL = replaceName(q, ":key", func(b *strings.Builder) {
		out.Params = append(out.Params, 0)
		b.WriteString(param(len(out.Params)))
	})
	return out
}

// BindKeys replaces each :keys outside quotes with n placeholders,
// param(k*n+1) to param(k*n+n) for the k-th :keys (from 0), and returns
// the statement and how many times :keys occurs: its arguments are the n
// keys, that many times over.
func BindKeys(q string, n int, param func(n int) string) (string, int) {
	uses := 0
	q = replaceName(q, ":keys", func(b *strings.Builder) {
		for k := range n {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString(param(uses*n + k + 1))
		}
		uses++
	})
	return q, uses
}

// replaceName writes q, trimmed, with each occurrence of name (":key")
// outside quotes, not after another ':' (a cast) and not followed by an
// identifier's byte, replaced by what write writes.
func replaceName(q, name string, write func(b *strings.Builder)) string {
	q = strings.TrimSpace(q)
	var (
		b      strings.Builder
		quotes quoteState
	)
	for i := 0; i < len(q); i++ {
		c := q[i]
		if quotes.outside(c) && c == ':' && strings.HasPrefix(q[i:], name) && (i == 0 || q[i-1] != ':') &&
			(i+len(name) == len(q) || !isIdentByte(q[i+len(name)])) {
			write(&b)
			i += len(name) - 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func isIdentByte(c byte) bool {
	return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// ValidateSources checks each source and that names are unique.
func ValidateSources(srcs []Source) error {
	if len(srcs) > MaxSources {
		return Errorf(CodeInvalidArgument, "sources: %d sources; at most %d", len(srcs), MaxSources)
	}
	seen := map[string]bool{}
	for _, s := range srcs {
		if err := s.Validate(); err != nil {
			return err
		}
		if seen[s.Name] {
			return Errorf(CodeInvalidArgument, "source %s: name: used twice", s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// SourceOutcome is what a close of one row did.
type SourceOutcome int

// Source outcomes.
const (
	// SourceClosed: the guard changed one row; the other statements ran
	// and the source.closed event was written, in one transaction.
	SourceClosed SourceOutcome = iota + 1
	// SourceNoop: the guard changed no row (paid, cancelled, moved or not
	// yet due by the database's clock); nothing changed.
	SourceNoop
	// SourceGuardError: the guard changed more than one row (the source
	// is misconfigured); its changes were rolled back.
	SourceGuardError
	// SourceFailed: a statement failed; the row's changes were rolled
	// back and it is retried.
	SourceFailed
	// SourceBlocked: the row, or a row a statement of its needed, was
	// locked by another transaction (the shop's) past the store's lock
	// wait, or its statement lost a deadlock; the row's changes were
	// rolled back, the other rows of the batch closed without it, and it
	// is retried alone soon.
	SourceBlocked
)

// SourceResult is the outcome of closing one row.
type SourceResult struct {
	Key     int64
	Outcome SourceOutcome
	// Deadline is the row's deadline: as closed (SourceClosed), or as it
	// is now when the row is still pending after a no-op (Pending).
	Deadline time.Time
	// ClosedAt is the database's time of the close (SourceClosed).
	ClosedAt time.Time
	// Pending (SourceNoop): the row is still pending, due at Deadline.
	Pending bool
	// Affected (SourceGuardError) is how many rows the guard changed.
	Affected int64
	// Err (SourceFailed, SourceBlocked) says which statement failed and
	// why.
	Err error
}

// SourceStore is implemented by stores whose database can hold a shop's
// tables (PostgreSQL, MySQL): OpenSource checks a source against the
// database and returns its table. Errors name the source and what to fix
// (an unknown table or column, a column of the wrong type, a statement
// that does not prepare); warnings name an index to create.
type SourceStore interface {
	OpenSource(ctx context.Context, src Source) (t SourceTable, warnings []string, err error)
}

// SourceTable reads and closes the rows of one source. Rows are
// DueItem values: ID is the row's key, At its deadline
// (rounded up to the millisecond). Methods are safe for concurrent use.
type SourceTable interface {
	// Due pages the pending rows due at or before p.Until in (deadline,
	// key) order after the cursor, of the partitions p.Parts (by
	// PartitionOf(key)), through the deadline's index.
	Due(ctx context.Context, p PendingDueParams) ([]DueItem, error)
	// Tail returns up to limit pending rows with key > after, by key,
	// through the key's index.
	Tail(ctx context.Context, after int64, limit int) ([]DueItem, error)
	// Holes returns up to limit pending rows whose keys lie in one of
	// ranges (each [lo, hi], inclusive), by key: rows whose keys were drawn
	// before a larger key the tail saw, committed since.
	Holes(ctx context.Context, ranges [][2]int64, limit int) ([]DueItem, error)
	// MaxKey returns the largest key in the table from SourceKeyMin to
	// SourceKeyMax (0 when there is none).
	MaxKey(ctx context.Context) (int64, error)
	// Pending returns the rows of keys that are pending, with their
	// deadlines now.
	Pending(ctx context.Context, keys []int64) ([]DueItem, error)
	// Close closes each row in one transaction, in key
	// order, and writes the closed rows' source.closed events and webhook
	// deliveries in it. A row locked by another transaction, or whose
	// statement lost a deadlock, is left out (SourceBlocked) and the
	// others close without it. Another database error that ends the
	// transaction (a lost connection) is returned, and nothing committed.
	Close(ctx context.Context, rows []DueItem) ([]SourceResult, error)
	// Remind settles the reminder of each of rows (ID the row's key, At
	// the deadline it was armed for, rounded up to the millisecond), in
	// one transaction, in key order: a row still pending with that
	// deadline, still ahead, gets its source.expiring event and webhook
	// deliveries (SourceReminderSent); one pending with that deadline
	// passed, or no longer pending, is SourceReminderSkipped; one pending
	// with another deadline is SourceReminderMoved (Deadline says which:
	// arm that one); one locked by another transaction is
	// SourceReminderBlocked and one not yet due by the database's clock
	// SourceReminderNotDue (nothing written: retry). A reminder settled
	// (sent or skipped) is recorded in the same transaction under
	// (source, key, deadline), so it is settled at most once, whichever
	// node or retry comes second (SourceReminderDone). Errors: a database
	// error that ends the transaction (nothing committed; a retry is
	// safe). The source must have a RemindBefore.
	Remind(ctx context.Context, rows []DueItem) ([]SourceReminded, error)
	// PruneReminders deletes up to limit of the source's settled
	// reminders whose deadline is before before, and returns how many.
	PruneReminders(ctx context.Context, before time.Time, limit int) (int, error)
	// BadRows returns up to limit pending rows that the reads above skip
	// because their key or deadline cannot be read or lies outside the
	// range (SourceKeyMin, SourceDeadlineMinMs and their maxima): those the
	// database finds by range (through the key's and the deadline's
	// indexes), and those the reads met since the last call.
	BadRows(ctx context.Context, limit int) ([]BadSourceRow, error)
}

// SourceRemindOutcome is what Remind did with one row's reminder.
type SourceRemindOutcome int

// Outcomes of a source row's reminder.
const (
	// SourceReminderSent: its source.expiring event was written.
	SourceReminderSent SourceRemindOutcome = iota + 1
	// SourceReminderSkipped: due but never to be sent: the row is no
	// longer pending, or its deadline passed too (after a restart).
	SourceReminderSkipped
	// SourceReminderDone: settled already for this deadline (by an
	// earlier attempt or another node); nothing written.
	SourceReminderDone
	// SourceReminderMoved: the row is pending with another deadline
	// (Deadline); nothing written.
	SourceReminderMoved
	// SourceReminderBlocked: another transaction (the shop's) holds the
	// row; nothing written, try again soon.
	SourceReminderBlocked
	// SourceReminderNotDue: not yet due by the database's clock (a
	// reminder is never early); nothing written, try again soon.
	SourceReminderNotDue
)

// SourceReminded reports one reminder Remind looked at.
type SourceReminded struct {
	Key     int64
	Outcome SourceRemindOutcome
	// Deadline is the deadline the reminder was for (Moved: the row's
	// deadline now); RemindAt is Deadline minus the lead.
	Deadline, RemindAt time.Time
	// SentAt is the database's time of the event (Sent).
	SentAt time.Time
}

// SourceIDBase is the first id of a source row's events where an order's
// id goes (events' and webhook deliveries' order_id): source ids lie in
// [SourceIDBase, TimerIDBase), above any order id an order store reaches
// (2^61 orders) and below every timer's.
const SourceIDBase int64 = 1 << 61

// IsSourceID reports whether id is a source row's (SourceEventOrderID).
func IsSourceID(id int64) bool { return id >= SourceIDBase && id < TimerIDBase }

// SourceEventOrderID is the id a source row's events carry where an
// order's id goes: the same for one row every time, so that its
// deliveries form one stream, and spread over the partitions by key.
func SourceEventOrderID(source string, key int64) int64 {
	h := fnv.New64a()
	h.Write([]byte(source))
	x := h.Sum64() ^ uint64(key)*0x9E3779B97F4A7C15
	x ^= x >> 31
	return SourceIDBase + int64(x&(1<<61-1))
}

// MarshalSourceReminderEvent returns the body of a source.expiring event
// written at createdAt: {"id","type","created_at","source","key",
// "deadline","remind_at"}. It cannot fail.
func MarshalSourceReminderEvent(id, source string, key int64, createdAt, deadline, remindAt time.Time) []byte {
	b, _ := json.Marshal(sourceEventJSON{ID: id, Type: EventSourceExpiring, CreatedAt: formatTime(createdAt), Source: source, Key: key,
		Deadline: formatTime(deadline), RemindAt: formatTime(remindAt)}) // strings and ints: cannot fail
	return b
}

// sourceEventJSON is a source row's event body: a source.closed carries
// closed_at, a source.expiring remind_at.
type sourceEventJSON struct {
	ID        string    `json:"id"`
	Type      EventType `json:"type"`
	CreatedAt string    `json:"created_at"`
	Source    string    `json:"source"`
	Key       int64     `json:"key"`
	Deadline  string    `json:"deadline"`
	ClosedAt  string    `json:"closed_at,omitempty"`
	RemindAt  string    `json:"remind_at,omitempty"`
}

// MarshalSourceEvent returns the body of a source.closed event:
// {"id","type","created_at","source","key","deadline","closed_at"}.
func MarshalSourceEvent(id, source string, key int64, deadline, closedAt time.Time) []byte {
	b, _ := json.Marshal(sourceEventJSON{ID: id, Type: EventSourceClosed, CreatedAt: formatTime(closedAt), Source: source, Key: key,
		Deadline: formatTime(deadline), ClosedAt: formatTime(closedAt)}) // strings and ints: cannot fail
	return b
}
