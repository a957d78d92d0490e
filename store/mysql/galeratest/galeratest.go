// Package galeratest gives tests a fresh database on a 3-node MariaDB
// Galera cluster, as mytest does on one server: the database is created
// once (Galera replicates the CREATE to every node) and the test gets one
// URL per node.
//
// The cluster is the one scripts/galera starts on loopback (SQL ports 4306,
// 4307 and 4308), or the nodes named by $HOURGLASS_TEST_GALERA_URLS. When it
// is not reachable the test is skipped, unless HOURGLASS_TEST_GALERA=1 or
// CI=true, which mean "the cluster was started for this run": then the test
// fails. (.ci/run starts the cluster before the tests.) A server that
// answers but is not a Synced member of a 3-node cluster always fails the
// test: something else listens on the port, or the cluster is broken.
package galeratest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/store/mysql/internal/myurl"
	"github.com/hourglass/hourglass/store/mysql/mytest"
)

// EnvURLs names the variable holding the nodes' URLs, comma-separated.
const EnvURLs = "HOURGLASS_TEST_GALERA_URLS"

// EnvRequire names the variable that, set to 1, makes an unreachable
// cluster a failure instead of a skip.
const EnvRequire = "HOURGLASS_TEST_GALERA"

// DefaultURLs are the nodes scripts/galera starts.
var DefaultURLs = []string{
	"mysql://root@127.0.0.1:4306/test",
	"mysql://root@127.0.0.1:4307/test",
	"mysql://root@127.0.0.1:4308/test",
}

// Nodes returns the cluster's node URLs (their database is the one the
// URLs name, test by default) after checking that every node is a Synced
// member of a cluster of that many nodes; it skips or fails the test as the
// package comment says.
func Nodes(t testing.TB) []string {
	t.Helper()
	urls := DefaultURLs
	if v := os.Getenv(EnvURLs); v != "" {
		urls = strings.Split(v, ",")
	}
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			t.Fatalf("galeratest: %s: %q is not a URL with a host", EnvURLs, raw)
		}
		conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
		if err != nil {
			msg := "galeratest: the Galera cluster is not reachable at " + u.Host + " (" + err.Error() +
				"); start it with scripts/galera start, or set " + EnvURLs
			if os.Getenv(EnvRequire) == "1" || os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
		conn.Close()
	}
	for _, raw := range urls {
		db := mytest.Admin(t, raw)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var state, size string
		err := db.QueryRowContext(ctx, `SELECT
	(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT'),
	(SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE')`).Scan(&state, &size)
		cancel()
		if err != nil {
			t.Fatalf("galeratest: %s: read wsrep status: %v", myurl.Redact(raw), err)
		}
		if state != "Synced" || size != strconv.Itoa(len(urls)) {
			t.Fatalf("galeratest: %s is %q in a cluster of %s nodes; want Synced in a cluster of %d (scripts/galera status)",
				myurl.Redact(raw), state, size, len(urls))
		}
	}
	return urls
}

// NewDatabase creates a database named hg_<random> on the cluster and
// returns its URL on each node (node 1 first), after it is visible on every
// node; it is dropped in t.Cleanup. Skips and failures as Nodes.
func NewDatabase(t testing.TB) []string {
	t.Helper()
	nodes := Nodes(t)
	var b [6]byte
	rand.Read(b[:])
	name := "hg_" + hex.EncodeToString(b[:])
	first := mytest.Admin(t, nodes[0])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A DDL statement is replicated in total order isolation: it runs on
	// every node at the same point of the cluster's history.
	if _, err := first.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"); err != nil {
		t.Fatalf("galeratest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := first.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("galeratest: drop database %s: %v", name, err)
		}
	})
	out := make([]string, len(nodes))
	for i, raw := range nodes {
		u, err := myurl.WithDatabase(raw, name)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = u
		db := mytest.Admin(t, raw)
		for {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?`, name).Scan(&n); err != nil {
				t.Fatalf("galeratest: %s: %v", myurl.Redact(raw), err)
			}
			if n == 1 {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("galeratest: database %s did not reach %s", name, myurl.Redact(raw))
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return out
}

// NewDatabaseFrom is NewDatabase for a database that starts as a copy of
// tmpl (mytest.Template), made on node 1 from a template database there;
// it returns once every node has applied the copy.
func NewDatabaseFrom(t testing.TB, tmpl mytest.Template) []string {
	t.Helper()
	nodes := Nodes(t)
	first := mytest.NewDatabaseFromOn(t, nodes[0], tmpl)
	cfg, err := myurl.Parse(first)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := []string{first}
	for _, raw := range nodes[1:] {
		u, err := myurl.WithDatabase(raw, cfg.DBName)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, u)
		// A read with wsrep_sync_wait waits until the node has applied
		// every write set the cluster committed before it: the copy's
		// tables and rows, made on node 1.
		conn, err := mytest.Admin(t, raw).Conn(ctx)
		if err != nil {
			t.Fatalf("galeratest: %s: %v", myurl.Redact(raw), err)
		}
		var n int
		_, err = conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = 1")
		if err == nil {
			err = conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?`, cfg.DBName).Scan(&n)
		}
		if err == nil {
			_, err = conn.ExecContext(ctx, "SET SESSION wsrep_sync_wait = DEFAULT")
		}
		conn.Close()
		if err != nil || n != 1 {
			t.Fatalf("galeratest: database %s on %s: %d found, %v", cfg.DBName, myurl.Redact(raw), n, err)
		}
	}
	return out
}
