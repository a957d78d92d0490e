package processtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// notUntilObserved are the labelled metrics with no series, so not in
// /metrics, until their first event (a retry, a delivery, a fire): they
// must be declared in package metrics instead.
var notUntilObserved = []string{"hourglass_db_retries_total", "hourglass_webhook_deliveries_total", "hourglass_timers_fired_total",
	// A source's metrics exist only on a node with --sources.
	"hourglass_source_closes_total", "hourglass_source_noops_total", "hourglass_source_guard_errors_total", "hourglass_source_close_errors_total",
	"hourglass_source_sweeper_recovered_total", "hourglass_source_close_lateness_seconds", "hourglass_source_window_rows"}

// TestGrafanaDashboard checks deploy/grafana/hourglass.json: promtool
// parses every panel's query (as a recording rule), and every metric name a
// query uses is one a running server exports: the binary is started, sent
// an order that closes at its deadline, and its /metrics read (a
// histogram's _bucket, _sum and _count included).
func TestGrafanaDashboard(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (Debian's prometheus package; .ci/run installs it)")
		}
		t.Skip("promtool not found (apt-get install prometheus)")
	}
	raw, err := os.ReadFile(repoFile("deploy", "grafana", "hourglass.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("hourglass.json: %v", err)
	}
	var exprs []string
	rules := "groups:\n  - name: dashboard\n    rules:\n"
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
			b, _ := json.Marshal(tg.Expr)
			rules += fmt.Sprintf("      - record: dashboard:panel%d\n        expr: %s\n", len(exprs), b)
		}
	}
	rulesFile := filepath.Join(t.TempDir(), "dashboard.rules.yml")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: a panel's query does not parse: %v\n%s", err, out)
	}

	// A running server's metric names.
	dir := t.TempDir()
	bin := binary(t)
	p := startHourglass(t, "grafana", bin, filepath.Join(dir, "data"))
	c := api.NewClient(p.url, "", nil)
	ctx := context.Background()
	if _, err := c.PutProduct(ctx, "sku-1", "Mug", "", 10); err != nil {
		t.Fatal(err)
	}
	o, _, err := c.CreateOrder(ctx, api.CreateOrderRequest{UserID: "u1", Items: []api.ItemJSON{{SKU: "sku-1", Quantity: 1}}, TimeoutMs: 1000}, "")
	if err != nil {
		t.Fatal(err)
	}
	var exported string
	testenv.EventuallyEvery(t, 20*time.Second, 200*time.Millisecond, fmt.Sprintf("order %d closed (hourglass_orders_closed_total on /metrics)", o.ID), func() bool {
		resp, err := http.Get(p.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		exported = string(b)
		return strings.Contains(exported, "hourglass_orders_closed_total{")
	})
	names := map[string]bool{}
	for _, line := range strings.Split(exported, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		names[name] = true
	}
	var declared []byte
	files, err := filepath.Glob(repoFile("metrics", "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("package metrics' files: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		declared = append(declared, b...)
	}
	metricRef := regexp.MustCompile(`\bhourglass_[a-z0-9_]+\b`)
	labelMatchers := regexp.MustCompile(`\{[^}]*\}`)
	for _, e := range exprs {
		for _, ref := range metricRef.FindAllString(labelMatchers.ReplaceAllString(e, "{}"), -1) {
			switch {
			case names[ref]:
			case slices.Contains(notUntilObserved, seriesBase(ref)) && strings.Contains(string(declared), `"`+seriesBase(ref)+`"`):
			default:
				t.Errorf("the dashboard queries %s, which the server does not export: %s", ref, e)
			}
		}
	}
}

// seriesBase is a histogram's name for one of its series (_bucket, _sum,
// _count), any other name as it is.
func seriesBase(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && strings.HasSuffix(base, "_seconds") {
			return base
		}
	}
	return name
}
