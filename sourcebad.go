package hourglass

import "time"

// The range of a source row that hourglass closes (SourceTable.BadRows
// reports the rest). A deadline lies from 1970-01-01T00:00:00.000Z to
// 9999-12-31T23:59:59.999Z, as a TIMESTAMP/DATETIME or as unix
// milliseconds: every time an event carries is RFC 3339 with a four-digit
// year. A key lies from 1 to 2^63-2: the tail reads keys above the largest
// it has seen, from 0 on an empty table, and needs a key above the last.
const (
	SourceKeyMin        int64 = 1
	SourceKeyMax        int64 = 1<<63 - 2
	SourceDeadlineMinMs int64 = 0
	SourceDeadlineMaxMs int64 = 253402300799999
)

// Why a source row is skipped (BadSourceRow.Reason), the values of the
// reason label of hourglass_source_bad_rows_total.
const (
	// BadKeyOutOfRange: the key is below SourceKeyMin or above
	// SourceKeyMax (an unsigned key beyond int64 included).
	BadKeyOutOfRange = "key_out_of_range"
	// BadDeadlineOutOfRange: the deadline lies outside [SourceDeadlineMin,
	// SourceDeadlineMax]: PostgreSQL's infinities, MySQL's zero dates,
	// milliseconds before 1970 or after 9999.
	BadDeadlineOutOfRange = "deadline_out_of_range"
	// BadDeadlineUnreadable: the database returned a deadline that is not
	// a date (MySQL's zero-in-date values such as 2026-00-15, or invalid
	// dates such as 2026-02-31 under ALLOW_INVALID_DATES).
	BadDeadlineUnreadable = "deadline_unreadable"
)

// BadSourceReasons returns every BadSourceRow.Reason.
func BadSourceReasons() []string {
	return []string{BadKeyOutOfRange, BadDeadlineOutOfRange, BadDeadlineUnreadable}
}

// BadSourceRow is a pending row of a source that hourglass cannot time:
// its key and deadline as the database writes them as text, and why.
type BadSourceRow struct {
	Key      string
	Deadline string
	Reason   string
	// FoundAt is when this node first found it (zero from
	// SourceTable.BadRows).
	FoundAt time.Time
}

// ValidSourceDeadline reports whether t lies in [SourceDeadlineMinMs,
// SourceDeadlineMaxMs].
func ValidSourceDeadline(t time.Time) bool {
	return !t.Before(FromUnixMilli(SourceDeadlineMinMs)) && !t.After(FromUnixMilli(SourceDeadlineMaxMs))
}
