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
// Two writes to one table (an extension and a payment of the same order)
// could touch one row twice, which one statement cannot do: the second
// starts a new statement. A statement that must run before a read (an
// advisory lock) has no target and is never joined.

// writeTarget returns the table a queued statement writes (INSERT INTO t,
// UPDATE t, DELETE FROM t), "pg_notify" for an announcement, or "" for a
// statement that runs on its own.
func writeTarget(sql string) string {
	f := strings.Fields(sql)
	switch {
	case len(f) >= 3 && f[0] == "INSERT" && f[1] == "INTO":
		return f[2]
	case len(f) >= 2 && f[0] == "UPDATE":
		return f[1]
	case len(f) >= 3 && f[0] == "DELETE" && f[1] == "FROM":
		return f[2]
	case len(f) >= 2 && f[0] == "SELECT" && strings.HasPrefix(f[1], "pg_notify("):
		return "pg_notify"
	}
	return ""
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
// none repeated in the run) replaced by one statement, in order.
func combine(all []stmt) []stmt {
	var (
		out  []stmt
		run  []stmt
		seen = map[string]bool{}
	)
	end := func() {
		if len(run) == 1 {
			out = append(out, run[0])
		} else if len(run) > 1 {
			out = append(out, joined(run))
		}
		run = run[:0:0]
		clear(seen)
	}
	for _, st := range all {
		t := st.target
		if t == "" {
			end()
			out = append(out, st)
			continue
		}
		if seen[t] {
			end()
		}
		seen[t] = true
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
