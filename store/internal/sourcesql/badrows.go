package sourcesql

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/hourglass/hourglass"
)

// A bad row (hourglass.BadSourceRow) is a pending row whose key or
// deadline cannot be read or lies out of hourglass's range. Every read of
// pending rows keeps inRange, so the database never hands one to a page
// and a page's cursor never stops at one; BadRows finds them by range,
// through the key's and the deadline's indexes. A value inRange cannot
// tell from its range (MySQL's zero-in-date 2026-00-15, read by a
// session with a lax sql_mode) reaches a page: readPage leaves it out,
// keeps it in met, and the page reads on past it.

// maxMet bounds the bad rows a Table keeps between two BadRows calls.
const maxMet = 1000

// metRows are the bad rows the reads met since BadRows last took them,
// by key. Safe for concurrent use.
type metRows struct {
	mu   sync.Mutex
	rows map[string]hourglass.BadSourceRow
}

func (m *metRows) add(r hourglass.BadSourceRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.rows == nil {
		m.rows = map[string]hourglass.BadSourceRow{}
	}
	if len(m.rows) < maxMet {
		m.rows[r.Key] = r
	}
}

// take returns the rows kept, up to limit, and forgets them.
func (m *metRows) take(limit int) []hourglass.BadSourceRow {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []hourglass.BadSourceRow
	for k, r := range m.rows {
		if len(out) == limit {
			break
		}
		out = append(out, r)
		delete(m.rows, k)
	}
	return out
}

// bounds are the deadline's range as SQL literals.
func (t *Table) bounds() (lo, hi string) {
	if t.ms {
		return strconv.FormatInt(hourglass.SourceDeadlineMinMs, 10), strconv.FormatInt(hourglass.SourceDeadlineMaxMs, 10)
	}
	return t.d.TimeBounds()
}

// rangeSQL is the condition of a row whose key and deadline lie in range
// (in), or of one whose deadline does not (!in; the key's is keyOutSQL).
func (t *Table) rangeSQL(in bool) string {
	if !in {
		lo, hi := t.bounds()
		return fmt.Sprintf("(%s < %s OR %s > %s)", t.deadline, lo, t.deadline, hi)
	}
	return fmt.Sprintf("%s BETWEEN %d AND %d AND %s", t.key, hourglass.SourceKeyMin, hourglass.SourceKeyMax, t.deadlineInSQL())
}

// deadlineInSQL is the condition of a row whose deadline lies in range.
func (t *Table) deadlineInSQL() string {
	lo, hi := t.bounds()
	return fmt.Sprintf("%s BETWEEN %s AND %s", t.deadline, lo, hi)
}

// keyOutSQL is the condition of a row whose key lies out of range.
func (t *Table) keyOutSQL() string {
	return fmt.Sprintf("(%s < %d OR %s > %d)", t.key, hourglass.SourceKeyMin, t.key, hourglass.SourceKeyMax)
}

// BadRows implements hourglass.SourceTable: the pending rows whose key
// lies out of range, then those whose deadline does (each query one or
// two index ranges), then those the reads met, up to limit in all.
func (t *Table) BadRows(ctx context.Context, limit int) ([]hourglass.BadSourceRow, error) {
	if limit <= 0 {
		return nil, nil
	}
	var out []hourglass.BadSourceRow
	for _, q := range []struct{ where, reason string }{
		{t.keyOutSQL(), hourglass.BadKeyOutOfRange},
		{fmt.Sprintf("%s BETWEEN %d AND %d AND %s", t.key, hourglass.SourceKeyMin, hourglass.SourceKeyMax, t.rangeSQL(false)), hourglass.BadDeadlineOutOfRange},
	} {
		if len(out) == limit {
			break
		}
		rows, err := t.d.DB().Query(ctx, fmt.Sprintf("SELECT %s, %s FROM %s WHERE (%s) AND %s LIMIT %d",
			t.d.Text(t.key), t.d.Text(t.deadline), t.table, t.src.Pending, q.where, limit-len(out)))
		if err != nil {
			return nil, fmt.Errorf("source %s: find bad rows: %w", t.src.Name, err)
		}
		for rows.Next() {
			var key, deadline *string
			if err := rows.Scan(&key, &deadline); err != nil {
				rows.Close()
				return nil, fmt.Errorf("source %s: find bad rows: %w", t.src.Name, err)
			}
			out = append(out, hourglass.BadSourceRow{Key: deref(key), Deadline: deref(deadline), Reason: q.reason})
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("source %s: find bad rows: %w", t.src.Name, err)
		}
	}
	for _, r := range t.met.take(limit - len(out)) {
		if !slices.ContainsFunc(out, func(o hourglass.BadSourceRow) bool { return o.Key == r.Key }) {
			out = append(out, r)
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// Bounds of the start-up sample.
const (
	// sampleRows is how many pending rows Open reads by the deadline's
	// index.
	sampleRows = 1000
	// sampleSpan: a median deadline further than this from now is refused
	// (decades away: a wrong unit, or not a deadline).
	sampleSpan = 20 * 365 * 24 * time.Hour
)

// checkUnit reads the latest deadlines of up to sampleRows pending rows
// and refuses the source when their median lies decades away from the
// database's now: epoch seconds or microseconds under deadline_unit: ms,
// or a TIMESTAMP column that holds something else than deadlines.
func (t *Table) checkUnit(ctx context.Context) error {
	cond := fmt.Sprintf("%s IS NOT NULL", t.deadline)
	if !t.ms { // an infinity cannot be read as a time
		cond = t.rangeSQL(true)
	}
	rows, err := t.d.DB().Query(ctx, fmt.Sprintf("SELECT %s FROM %s WHERE (%s) AND %s ORDER BY %s DESC LIMIT %d",
		t.deadline, t.table, t.src.Pending, cond, t.deadline, sampleRows))
	if err != nil {
		return fmt.Errorf("source %s: sample the pending rows of %s: %w", t.src.Name, t.qual, err)
	}
	var ms []int64 // the sample, in unix ms (as the column reads, under deadline_unit: ms)
	for rows.Next() {
		var v any
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("source %s: sample the pending rows of %s: %w", t.src.Name, t.qual, err)
		}
		if t.ms {
			if n, err := asInt(v); err == nil {
				ms = append(ms, n)
			}
		} else if at, err := asTime(v); err == nil {
			ms = append(ms, at.UnixMilli())
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("source %s: sample the pending rows of %s: %w", t.src.Name, t.qual, err)
	}
	if len(ms) == 0 {
		return nil
	}
	now, err := t.d.NowMs(ctx, t.d.DB())
	if err != nil {
		return fmt.Errorf("source %s: read the database's now: %w", t.src.Name, err)
	}
	slices.Sort(ms)
	median := ms[len(ms)/2]
	near := func(v int64) bool { return absDiff(v, now) <= sampleSpan.Milliseconds() }
	if near(median) {
		return nil
	}
	col := fmt.Sprintf("%s.%s", t.qual, t.src.Deadline)
	fail := func(format string, args ...any) error {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "source %s: deadline: %s", t.src.Name, fmt.Sprintf(format, args...))
	}
	if !t.ms {
		return fail("%s: the median deadline of %d pending rows is %s, decades from now (%s); a deadline column holds the time each row closes, in UTC",
			col, len(ms), stamp(median), stamp(now))
	}
	switch {
	case median < (1<<63-1)/1000 && median > -(1<<63-1)/1000 && near(median*1000):
		return fail("%s holds epoch seconds, but deadline_unit: ms reads milliseconds: the median of %d pending rows is %d, %s as seconds but %s as ms; store milliseconds (%d)",
			col, len(ms), median, stamp(median*1000), stamp(median), median*1000)
	case near(median / 1000):
		return fail("%s holds epoch microseconds, but deadline_unit: ms reads milliseconds: the median of %d pending rows is %d, %s as microseconds; store milliseconds (%d)",
			col, len(ms), median, stamp(median/1000), median/1000)
	}
	return fail("%s under deadline_unit: ms: the median of %d pending rows is %d, %s as milliseconds, decades from now (%s); store unix milliseconds",
		col, len(ms), median, stamp(median), stamp(now))
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// stamp is unix ms as RFC 3339, or the number when out of range.
func stamp(ms int64) string {
	if ms < hourglass.SourceDeadlineMinMs || ms > hourglass.SourceDeadlineMaxMs {
		return strconv.FormatInt(ms, 10) + " ms"
	}
	return hourglass.FromUnixMilli(ms).Format(hourglass.TimeFormat)
}

// asInt reads a BIGINT as the driver gives it.
func asInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case int32:
		return int64(v), nil
	case int16:
		return int64(v), nil
	case int8:
		return int64(v), nil
	case uint64:
		if v > 1<<63-1 {
			return 0, fmt.Errorf("%d is beyond int64", v)
		}
		return int64(v), nil
	case []byte:
		return strconv.ParseInt(string(v), 10, 64)
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("a %T, not an integer", v)
}

// text is a value as the driver gave it, for a report.
func text(v any) string {
	switch v := v.(type) {
	case nil:
		return "NULL"
	case []byte:
		return string(v)
	case time.Time:
		return v.UTC().Format("2006-01-02 15:04:05.999999")
	}
	return fmt.Sprint(v)
}

// cursorArg is a deadline as the driver gave it, as an argument that
// compares with the column (the text of a MySQL DATETIME).
func cursorArg(v any) any {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return v
}
