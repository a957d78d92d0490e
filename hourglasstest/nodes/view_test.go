package nodes

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// setupNode returns a Node whose URL is a fake server answering /v1/cluster
// and /metrics with the bodies given (a 404 for an empty cluster body).
func setupNode(t *testing.T, cluster, metrics string) *Node {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/v1/cluster" && cluster != "":
			w.Write([]byte(cluster))
		case r.URL.Path == "/metrics":
			w.Write([]byte(metrics))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return &Node{c: &Cluster{}, id: "fake", addr: strings.TrimPrefix(srv.URL, "http://")}
}

func TestView(t *testing.T) {
	t.Parallel()
	n := setupNode(t, `{"partitions":4,"nodes":[
		{"id":"a","addr":"127.0.0.1:1","started_at":"2026-11-23T10:00:00.000Z","last_seen":"2026-11-23T10:00:01.000Z","partitions":[0,2],"self":true},
		{"id":"b","addr":"127.0.0.1:2","started_at":"2026-11-23T10:00:00.000Z","last_seen":"2026-11-23T10:00:01.000Z","partitions":[1],"self":false}]}`, "")
	v, err := n.View(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		part  int
		owner string
	}{{0, "a"}, {1, "b"}, {2, "a"}, {3, ""}} {
		if got := v.Owner(tc.part); got != tc.owner {
			t.Errorf("Owner(%d) = %q, want %q", tc.part, got, tc.owner)
		}
	}
	if got := v.Owned("a"); !slices.Equal(got, []int{0, 2}) {
		t.Errorf("Owned(a) = %v", got)
	}
	if got := v.Unowned(); !slices.Equal(got, []int{3}) {
		t.Errorf("Unowned() = %v", got)
	}
	if got, want := v.Summary(), "a:2 b:1 unowned:1"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
}

func TestViewWithoutClusterAPI(t *testing.T) {
	t.Parallel()
	if _, err := setupNode(t, "", "").View(t.Context()); err != ErrNoClusterAPI {
		t.Errorf("View of a binary without /v1/cluster: %v, want ErrNoClusterAPI", err)
	}
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	n := setupNode(t, "", `# HELP hourglass_partitions_owned Partitions.
# TYPE hourglass_partitions_owned gauge
hourglass_partitions_owned 21
hourglass_orders_closed_total{by="scheduler"} 10
hourglass_orders_closed_total{by="sweeper"} 2
hourglass_close_lateness_seconds_bucket{le="+Inf"} 12
`)
	samples, err := n.Samples(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := samples[`hourglass_orders_closed_total{by="sweeper"}`]; got != 2 {
		t.Errorf(`Samples: hourglass_orders_closed_total{by="sweeper"} = %g, want 2`, got)
	}
	m, err := n.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{
		"hourglass_partitions_owned":              21,
		"hourglass_orders_closed_total":           12,
		"hourglass_close_lateness_seconds_bucket": 12,
	} {
		if m[name] != want {
			t.Errorf("%s = %g, want %g", name, m[name], want)
		}
	}
}

func TestNodeDatabaseURL(t *testing.T) {
	t.Parallel()
	one := Config{DatabaseURL: "postgres://a/db"}
	several := Config{DatabaseURL: "ignored", DatabaseURLs: []string{"mysql://h1/db", "mysql://h2/db", "mysql://h3/db"}}
	for _, tc := range []struct {
		cfg  Config
		i    int
		want string
	}{
		{one, 0, "postgres://a/db"},
		{one, 5, "postgres://a/db"},
		{several, 0, "mysql://h1/db"},
		{several, 2, "mysql://h3/db"},
		{several, 4, "mysql://h2/db"},
	} {
		if got := tc.cfg.NodeDatabaseURL(tc.i); got != tc.want {
			t.Errorf("NodeDatabaseURL(%d) with %v = %q, want %q", tc.i, tc.cfg.DatabaseURLs, got, tc.want)
		}
	}
	if err := (Config{Binary: "b", LogDir: "d", DatabaseURLs: []string{"mysql://h1/db", ""}}).validate(); err == nil {
		t.Error("validate accepted an empty URL in DatabaseURLs")
	}
}

func TestSameDatabase(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ server, db, want string }{
		{"mysql://root@127.0.0.1:4307/test", "mysql://root@127.0.0.1:4306/hourglass_scratch_ab", "mysql://root@127.0.0.1:4307/hourglass_scratch_ab"},
		{"postgres://u:p@h2:5432/test?sslmode=disable", "postgres://u:p@h1:5432/s1?sslmode=disable", "postgres://u:p@h2:5432/s1?sslmode=disable"},
	} {
		got, err := SameDatabase(tc.server, tc.db)
		if err != nil || got != tc.want {
			t.Errorf("SameDatabase(%q, %q) = %q, %v; want %q", tc.server, tc.db, got, err, tc.want)
		}
	}
}
