package main

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

	"github.com/alecthomas/kong"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
	"go.yaml.in/yaml/v2"
)

// deployDir is the repo's deploy/ directory, seen from this package.
var deployDir = filepath.Join("..", "..", "deploy")

// settingEnvs returns every environment variable a hourglass setting
// reads, from the env tags of the CLI's kong model (every command's flags).
func settingEnvs(t *testing.T) map[string]bool {
	t.Helper()
	k, err := kong.New(&cli{}, kong.Name("hourglass"))
	if err != nil {
		t.Fatalf("kong.New: %v", err)
	}
	envs := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			for _, e := range f.Tag.Envs {
				envs[e] = true
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(k.Model.Node)
	if !envs["HOURGLASS_DATABASE_URL"] || !envs["HOURGLASS_ADDR"] {
		t.Fatalf("the CLI model's env tags lack HOURGLASS_DATABASE_URL or HOURGLASS_ADDR: %v", envs)
	}
	return envs
}

// composeFile is the part of deploy/compose.yaml the test reads; YAML
// anchors and merge keys are resolved by the decoder.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
	} `yaml:"services"`
}

// TestComposeFile checks deploy/compose.yaml: every HOURGLASS_* variable it
// sets is a real setting (an env tag of the CLI), every file it mounts
// exists, there are three hourglass nodes on their own ports sharing one
// database URL, and PostgreSQL, Prometheus (with the alert rules) and
// Grafana (with the dashboard) are there.
func TestComposeFile(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join(deployDir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	envs := settingEnvs(t)
	var nodes, urls, ports []string
	mounted := map[string]bool{}
	for name, s := range c.Services {
		for k, v := range s.Environment {
			if strings.HasPrefix(k, "HOURGLASS_") && !envs[k] {
				t.Errorf("service %s sets %s: no setting reads it", name, k)
			}
			if k == "HOURGLASS_DATABASE_URL" {
				urls = append(urls, v)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				continue // a named volume
			}
			mounted[filepath.Base(src)] = true
			if _, err := os.Stat(filepath.Join(deployDir, src)); err != nil {
				t.Errorf("service %s mounts %s: %v", name, src, err)
			}
		}
		if strings.Contains(s.Image, "hourglass") {
			nodes = append(nodes, name)
			if len(s.Ports) != 1 {
				t.Errorf("node %s: ports %v, want one", name, s.Ports)
			}
			ports = append(ports, s.Ports...)
			if s.Environment["HOURGLASS_DATABASE_URL"] == "" {
				t.Errorf("node %s has no HOURGLASS_DATABASE_URL", name)
			}
		}
	}
	if len(nodes) != 3 {
		t.Errorf("hourglass nodes %v: want 3", nodes)
	}
	slices.Sort(ports)
	if len(slices.Compact(ports)) != len(nodes) {
		t.Errorf("node ports %v: want one of its own each", ports)
	}
	if slices.Sort(urls); len(slices.Compact(urls)) != 1 || !strings.HasPrefix(urls[0], "postgres://") {
		t.Errorf("database URLs %v: want one PostgreSQL URL, shared by every node", urls)
	}
	for _, s := range []string{"postgres", "prometheus", "grafana"} {
		if _, ok := c.Services[s]; !ok {
			t.Errorf("no %s service", s)
		}
	}
	for _, f := range []string{"alerts.yml", "prometheus.yml", "hourglass.json"} {
		if !mounted[f] {
			t.Errorf("%s is not mounted", f)
		}
	}
}

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
	raw, err := os.ReadFile(filepath.Join(deployDir, "grafana", "hourglass.json"))
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
	bin := buildBinary(t, dir)
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
	files, err := filepath.Glob(filepath.Join("..", "..", "metrics", "*.go"))
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
