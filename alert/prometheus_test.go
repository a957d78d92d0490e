package alert_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/alert"
	"github.com/hourglass/hourglass/metrics"
	yaml "go.yaml.in/yaml/v2"
)

// rulesFile is the Prometheus alerting-rules file shipped in the repo.
var rulesFile = filepath.Join("..", "deploy", "prometheus", "alerts.yml")

type ruleGroups struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// TestPrometheusRules checks deploy/prometheus/alerts.yml against the code:
// one alert per built-in rule (by its rule label), each comparing against
// the built-in default threshold, over metric names the registry really
// exposes; the histogram's buckets are the recorder's. With promtool
// installed it also runs promtool check rules and the rules' unit tests
// (alerts_test.yml); without it the test skips that part (and fails under
// CI=true).
func TestPrometheusRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var file ruleGroups
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}

	// DeadLetterMax as --dead-letter-max's default.
	ev, err := alert.New(alert.Config{Backlog: &fakeCounts{}, Activity: alert.NewRecorder(nil), DeadLetters: &fakeCounts{},
		ClockSkew: fixedSkew(0), EventSinks: &sinkLag{}, Thresholds: alert.Thresholds{DeadLetterMax: 100000}})
	if err != nil {
		t.Fatal(err)
	}
	defaults := map[string]float64{}
	for _, s := range ev.Status() {
		defaults[s.Rule] = s.Threshold
	}

	m := metrics.New(func() int { return 0 })
	m.AlertFiring(alert.RuleCloseBacklog, false) // a vector shows once it has a series
	m.EventSinks(map[string]func() time.Duration{"kafka://k:9092/orders": func() time.Duration { return 0 }})
	names, err := m.Names()
	if err != nil {
		t.Fatal(err)
	}
	histograms := map[string]bool{"hourglass_close_lateness_seconds": true, "hourglass_http_request_duration_seconds": true, "hourglass_store_commit_seconds": true, "hourglass_store_commit_writes": true}
	metricRef := regexp.MustCompile(`\bhourglass_[a-z0-9_]+\b`)
	threshold := regexp.MustCompile(`>\s*([0-9.]+)\s*$`)

	seen := map[string]string{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			rule := r.Labels["rule"]
			if _, ok := defaults[rule]; !ok {
				t.Errorf("alert %s: label rule=%q is not a built-in rule (%v)", r.Alert, rule, ev.Rules())
				continue
			}
			if prev, dup := seen[rule]; dup {
				t.Errorf("alerts %s and %s both have rule=%q", prev, r.Alert, rule)
			}
			seen[rule] = r.Alert
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: needs a severity label and a summary annotation", r.Alert)
			}
			m := threshold.FindStringSubmatch(strings.TrimSpace(r.Expr))
			if m == nil {
				t.Errorf("alert %s: expr does not end in '> threshold': %s", r.Alert, r.Expr)
			} else if v, err := strconv.ParseFloat(m[1], 64); err != nil || v != defaults[rule] {
				t.Errorf("alert %s: threshold %s, want the built-in default %g", r.Alert, m[1], defaults[rule])
			}
			for _, ref := range metricRef.FindAllString(r.Expr, -1) {
				name := ref
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(ref, suffix); ok && histograms[base] {
						name = base
					}
				}
				if !slices.Contains(names, name) {
					t.Errorf("alert %s: metric %s is not exposed by hourglass (%v)", r.Alert, ref, names)
				}
			}
		}
	}
	for _, rule := range ev.Rules() {
		if _, ok := seen[rule]; !ok {
			t.Errorf("%s has no alert for the built-in rule %s", rulesFile, rule)
		}
	}

	// The metric's buckets are the recorder's, so both p99s agree.
	var bounds []float64
	for line := range strings.Lines(metricsText(t, m)) {
		rest, ok := strings.CutPrefix(line, `hourglass_close_lateness_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, _, _ := strings.Cut(rest, `"`)
		if le == "+Inf" {
			continue
		}
		v, err := strconv.ParseFloat(le, 64)
		if err != nil {
			t.Fatalf("bucket le=%q: %v", le, err)
		}
		bounds = append(bounds, v)
	}
	if !slices.Equal(bounds, alert.LatenessBounds[:]) {
		t.Errorf("hourglass_close_lateness_seconds buckets %v, want alert.LatenessBounds %v", bounds, alert.LatenessBounds)
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (Debian package prometheus) and CI=true")
		}
		t.Skip("promtool not found: install Debian's prometheus package to check the rules with it")
	}
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.CommandContext(t.Context(), promtool, args...)
		cmd.Dir = filepath.Dir(rulesFile)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
