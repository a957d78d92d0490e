package processtest

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
	"github.com/hourglass/hourglass/store/storetest"
)

// TestStartupErrors: a configuration mistake stops `hourglass serve` at
// start-up with exit status 1 and one log line that names what to fix.
func TestStartupErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := binary(t)
	// A port nothing listens on, for "unreachable broker".
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() }) // the parallel subtests run after this function returns
	openDir := filepath.Join(dir, "world-writable")
	if err := os.Mkdir(openDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(openDir, 0o777); err != nil { // whatever the umask
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string // in the error line
	}{
		{"unknown mechanism", []string{"--delay", "cron"}, `want one of wheel, heap`},
		{"address in use", []string{"--addr", busy.Addr().String()}, "listen on " + busy.Addr().String()},
		{"data dir is a file", []string{"--data-dir", bin}, "data dir"},
		{"data dir writable by others", []string{"--data-dir", openDir}, "is writable by others (mode 0777): run chmod 700"},
		{"max connections", []string{"--max-connections=2000000"}, "--max-connections: must be between 1 and 1000000"},
		{"webhook max", []string{"--webhook-max", "0"}, "--webhook-max: must be between 1 and 10000"},
		{"load interval not below window", []string{"--window", "10s", "--load-interval", "10s"}, "LoadInterval"},
		{"redis unreachable", []string{"--delay", "redis", "--redis-url", "redis://" + dead + "/0"}, "--delay redis"},
		{"redis bad URL", []string{"--delay", "redis", "--redis-url", "http://nope"}, "--delay redis"},
		{"rabbitmq unreachable", []string{"--delay", "rabbitmq", "--rabbitmq-url", "amqp://guest:guest@" + dead + "/"}, "--delay rabbitmq"},
		{"nats unreachable", []string{"--delay", "nats", "--nats-url", "nats://" + dead}, "--delay nats"},
		{"kafka unreachable", []string{"--delay", "kafka", "--kafka-url", "kafka://" + dead}, "--delay kafka"},
		{"database URL scheme", []string{"--database-url", "oracle://scott:tiger-secret@" + dead + "/db"}, "unknown scheme"},
		{"sqlite URL relative", []string{"--database-url", "sqlite://data/x.db"}, "sqlite:///absolute/path/file.db"},
		{"db max conns", []string{"--db-max-conns", "5000"}, "--db-max-conns"},
		{"commit gather", []string{"--commit-gather", "1s"}, "--commit-gather must be 0..50ms, got 1s"},
		{"gc percent", []string{"--gc-percent", "5"}, "--gc-percent: want 10 to 10000 or off (with --memory-limit)"},
		{"gc off without a limit", []string{"--gc-percent", "off"}, "--gc-percent off needs --memory-limit"},
		{"memory limit", []string{"--memory-limit", "1GB"}, "--memory-limit: want a size of at least 64MiB"},
		{"postgres unreachable", []string{"--database-url", "postgres://hg:secret@" + dead + "/db"}, "cannot reach the server at " + dead},
		{"postgres bad URL", []string{"--database-url", "postgres://hg:secret@%zz/db"}, "postgres"},
		{"mysql unreachable", []string{"--database-url", "mysql://hg:secret@" + dead + "/db"}, "cannot reach the server at " + dead},
		// The tokens hold "secret": an error must not show them.
		{"empty token", []string{"--api-token", "op-secret,,op-secret-2"}, "--api-token: item 2 of 3 is empty"},
		{"token of both roles", []string{"--api-token", "op-secret", "--viewer-token", "view-secret,op-secret"}, "item 1 of --api-token is also item 2 of --viewer-token"},
		{"viewer token alone", []string{"--viewer-token", "view-secret"}, "--viewer-token needs --api-token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := []string{"serve", "--data-dir", filepath.Join(t.TempDir(), "data")}
			if !slices.Contains(tt.args, "--addr") {
				args = append(args, "--addr", "127.0.0.1:0")
			}
			args = append(args, tt.args...)
			cmd := exec.CommandContext(ctx, bin, args...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			exit, ok := err.(*exec.ExitError)
			if !ok || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, stderr.String())
			}
			var errLines []string
			for _, line := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
				if strings.Contains(line, "level=ERROR") {
					errLines = append(errLines, line)
				}
			}
			if len(errLines) != 1 || !strings.Contains(errLines[0], tt.want) {
				t.Fatalf("want exactly one error line containing %q, got:\n%s", tt.want, stderr.String())
			}
			if strings.Contains(stderr.String(), "secret") {
				t.Fatalf("the output shows the database password:\n%s", stderr.String())
			}
			t.Logf("%s", errLines[0])
		})
	}
}

// TestGCSettings: serve sets the collector's target and memory limit its
// flags name, and 400 with no limit when neither they nor GOGC and
// GOMEMLIMIT do (the runtime's own metrics say what is in force).
func TestGCSettings(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	tests := []struct {
		name           string
		args           []string
		percent, limit float64
	}{
		{"flags", []string{"--gc-percent", "250", "--memory-limit", "512MiB"}, 250, 512 << 20},
		// The runtime reports the collector off as the largest uint64.
		{"collector off under a limit", []string{"--gc-percent", "off", "--memory-limit", "1GiB"}, math.MaxUint64, 1 << 30},
	}
	if os.Getenv("GOGC") == "" && os.Getenv("GOMEMLIMIT") == "" { // the child inherits them
		tests = append(tests, struct {
			name           string
			args           []string
			percent, limit float64
		}{"defaults", nil, 400, math.MaxInt64})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := startHourglass(t, tt.name, bin, filepath.Join(t.TempDir(), "data"), tt.args...)
			metrics := readMetrics(t, p.url)
			if got := metrics["go_gc_gogc_percent"]; got != tt.percent {
				t.Errorf("go_gc_gogc_percent = %v, want %v", got, tt.percent)
			}
			if got := metrics["go_gc_gomemlimit_bytes"]; got != tt.limit {
				t.Errorf("go_gc_gomemlimit_bytes = %v, want %v", got, tt.limit)
			}
		})
	}
}

// readMetrics returns the samples without labels of the server's /metrics.
func readMetrics(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(body)) {
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		if f, err := strconv.ParseFloat(value, 64); err == nil {
			out[name] = f
		}
	}
	return out
}

// TestMigrateCommand: `hourglass migrate --status` lists every migration as
// pending on a new database, `hourglass migrate` applies them once, and the
// status then shows them applied; on every store
// (testenv.EveryCase).
func TestMigrateCommand(t *testing.T) {
	testenv.EveryCase(t, testenv.Default, stores, nil, testMigrateCommand)
}

func testMigrateCommand(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	url := storetest.URL(t)
	run := func(args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, append([]string{"migrate", "--database-url", url}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("hourglass migrate %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	before := run("--status")
	if !strings.Contains(before, "0 applied") || strings.Contains(before, "\tapplied") {
		t.Fatalf("status of a new database:\n%s", before)
	}
	if out := run(); !strings.Contains(out, "applied ") || strings.Contains(out, "applied 0 ") {
		t.Fatalf("migrate on a new database:\n%s", out)
	}
	if out := run(); !strings.Contains(out, "applied 0 migrations") {
		t.Fatalf("second migrate applied something:\n%s", out)
	}
	after := run("--status")
	if !strings.Contains(after, " 0 pending") || strings.Contains(after, "\tpending") {
		t.Fatalf("status after migrate:\n%s", after)
	}
}
