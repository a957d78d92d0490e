package processtest

import (
	"fmt"
	"os"
	"testing"

	"github.com/hourglass/hourglass/store"
	"github.com/hourglass/hourglass/store/postgres/pgtest"
	"github.com/jackc/pgx/v5"
)

// backendCPU measures the CPU time of the PostgreSQL backends connected to
// one database (pg_stat_activity), from /proc/<pid>/schedstat: the
// database server's share of a benchmark that does not count other
// databases' work on the same server. The server's shared processes (WAL
// writer, checkpointer) are not in it.
type backendCPU struct {
	tb    testing.TB
	conn  *pgx.Conn // nil: not PostgreSQL, or not on this machine
	first map[int32]int64
}

// newBackendCPU connects to dbURL when kind is PostgreSQL.
func newBackendCPU(tb testing.TB, kind, dbURL string) *backendCPU {
	m := &backendCPU{tb: tb}
	if kind != store.KindPostgres {
		return m
	}
	conn, err := pgx.Connect(tb.Context(), dbURL)
	if err != nil {
		tb.Fatalf("backend CPU: connect: %v", err)
	}
	tb.Cleanup(func() { conn.Close(tb.Context()) })
	m.conn = conn
	return m
}

// read returns each backend's CPU nanoseconds so far, false when one
// cannot be read (the server is not on this machine).
func (m *backendCPU) read() (map[int32]int64, bool) {
	rows, err := m.conn.Query(m.tb.Context(), `SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`)
	if err != nil {
		m.tb.Fatalf("backend CPU: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		m.tb.Fatalf("backend CPU: %v", err)
	}
	out := make(map[int32]int64, len(pids))
	for _, pid := range pids {
		ns, ok := pgtest.ProcessCPU(pid)
		if !ok {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
				continue // ended since the query
			}
			return nil, false
		}
		out[pid] = int64(ns)
	}
	return out, true
}

// start takes the first reading.
func (m *backendCPU) start() {
	if m.conn == nil {
		return
	}
	if first, ok := m.read(); ok {
		m.first = first
	}
}

// since returns the backends' CPU seconds since start: a backend that
// connected after it counts whole, one that ended is not counted.
func (m *backendCPU) since() (float64, bool) {
	if m.conn == nil || m.first == nil {
		return 0, false
	}
	now, ok := m.read()
	if !ok {
		return 0, false
	}
	var ns int64
	for pid, v := range now {
		ns += v - m.first[pid]
	}
	return float64(ns) / 1e9, true
}
