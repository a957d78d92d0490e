package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
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
