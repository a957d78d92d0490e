package postgres

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Each statement of a pipeline costs the server its own executor start-up,
// snapshot, plan-cache check and protocol messages, about as much as a
// small write itself (docs/benchmarks/postgres-speed.md). So the writes a
// txn queues go out joined: each run of consecutive statements that write
// different tables becomes one statement of data-modifying CTEs (combine),
// and a batch of creates sends its inserts, its stock update, its events
// and its announcement as one statement before the COMMIT.
//
// The sub-statements of a WITH run on one snapshot, in no set order, and
// none sees another's rows; that is safe for writes to different tables
// whose rows the batch has locked (or inserts), and foreign keys are
// checked at the end of the statement, as between separate statements.
// Two updates or deletes of one table (an extension and a payment of the
// same order) could touch one row twice, which one statement cannot do:
// the second starts a new statement. A plain INSERT adds rows that no
// other sub-statement's snapshot holds, and every UPDATE and DELETE the
// writer queues names rows by the keys of rows it read (locked) earlier in
// the transaction, never one the batch inserts: so an INSERT joins a run
// that updates its table, and the reverse (a batch's creates and closes
// are one statement). An upsert (INSERT … ON CONFLICT) probes the rows
// the others insert, so it shares its table with no other sub-statement.
// A statement that must run before a read (an advisory lock) has no target
// and is never joined.

// writeKind is how a queued write changes its table (writeTarget).
type writeKind int

const (
	addsRows    writeKind = iota + 1 // a plain INSERT
	changesRows                      // an UPDATE, a DELETE, a NOTIFY
	upsertsRows                      // INSERT … ON CONFLICT
)

// writeTarget returns the table a queued statement writes (INSERT INTO t,
// UPDATE t, DELETE FROM t) and how, "pg_notify" for an announcement, or ""
// for a statement that runs on its own.
func writeTarget(sql string) (string, writeKind) {
	f := strings.Fields(sql)
	switch {
	case len(f) >= 3 && f[0] == "INSERT" && f[1] == "INTO":
		if strings.Contains(sql, "ON CONFLICT") {
			return f[2], upsertsRows
		}
		return f[2], addsRows
	case len(f) >= 2 && f[0] == "UPDATE":
		return f[1], changesRows
	case len(f) >= 3 && f[0] == "DELETE" && f[1] == "FROM":
		return f[2], changesRows
	case len(f) >= 2 && f[0] == "SELECT" && strings.HasPrefix(f[1], "pg_notify("):
		return "pg_notify", changesRows
	}
	return "", 0
}

// joins reports whether a write of kind joins a run whose writes to the
// same table are of the kinds in had.
func joins(kind writeKind, had map[writeKind]bool) bool {
	switch kind {
	case addsRows:
		return !had[upsertsRows]
	case changesRows:
		return !had[changesRows] && !had[upsertsRows]
	}
	return len(had) == 0
}

// param matches a statement's parameters ($1, $2, …): the batch's SQL has
// no dollar quotes or literals containing one.
var param = regexp.MustCompile(`\$([0-9]+)`)

// renumber shifts sql's parameters by offset.
func renumber(sql string, offset int) string {
	if offset == 0 {
		return sql
	}
	return param.ReplaceAllStringFunc(sql, func(p string) string {
		n, _ := strconv.Atoi(p[1:])
		return "$" + strconv.Itoa(n+offset)
	})
}

// combine returns all with each run of joinable statements (a target,
// and joins with the run's other writes to it) replaced by one statement,
// in order.
func combine(all []stmt) []stmt {
	var (
		out  []stmt
		run  []stmt
		kept = map[string]map[writeKind]bool{} // the run's kinds of write, by target
	)
	end := func() {
		if len(run) == 1 {
			out = append(out, run[0])
		} else if len(run) > 1 {
			out = append(out, joined(run))
		}
		run = run[:0:0]
		clear(kept)
	}
	for _, st := range all {
		t := st.target
		if t == "" {
			end()
			out = append(out, st)
			continue
		}
		if !joins(st.kind, kept[t]) {
			end()
		}
		if kept[t] == nil {
			kept[t] = map[writeKind]bool{}
		}
		kept[t][st.kind] = true
		run = append(run, st)
	}
	end()
	return out
}

// joined is run as one statement: each plain statement a CTE (a SELECT
// one counted by the main query, so that it runs), a statement with CTEs
// of its own (with) contributing them and its columns (cols), whose values
// go to its answer.
func joined(run []stmt) stmt {
	var (
		ctes, cols, names []string
		args              []any
	)
	for i, st := range run {
		names = append(names, st.name)
		offset := len(args)
		args = append(args, st.args...)
		if st.with != "" {
			ctes = append(ctes, renumber(st.with, offset))
			for _, c := range st.cols {
				cols = append(cols, renumber(c, offset))
			}
			continue
		}
		name := "w" + strconv.Itoa(i)
		ctes = append(ctes, name+" AS (\n"+renumber(st.sql, offset)+"\n)")
		if st.target == "pg_notify" {
			cols = append(cols, "(SELECT count(*) FROM "+name+")")
		}
	}
	return stmt{name: strings.Join(names, ", "), sql: "WITH " + strings.Join(ctes, ",\n") + "\nSELECT " + strings.Join(cols, ", "), args: args,
		read: func(br pgx.BatchResults) error {
			if len(cols) == 0 {
				_, err := br.Exec()
				return err
			}
			vals := make([]int64, len(cols))
			if err := scanCounts(br, vals); err != nil {
				return err
			}
			at := 0
			for _, st := range run {
				n := len(st.cols)
				if st.with == "" && st.target == "pg_notify" {
					n = 1
				}
				if st.answer != nil {
					st.answer(vals[at : at+n])
				}
				at += n
			}
			return nil
		}}
}

// scanCounts reads a row of counts into vals.
func scanCounts(br pgx.BatchResults, vals []int64) error {
	dest := make([]any, len(vals))
	for i := range vals {
		dest[i] = &vals[i]
	}
	return br.QueryRow().Scan(dest...)
}
