package processtest

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hourglass/hourglass/internal/testenv"
)

// containerfile is the final stage of the repo's Containerfile: what a
// container runtime runs.
type containerfile struct {
	from        string   // the final stage's base
	entrypoint  []string // exec form
	cmd         []string
	healthcheck []string // HEALTHCHECK CMD, exec form
	env         map[string]string
	user        string
	volumes     []string
	expose      []string
	buildEnv    map[string]string // ENV of the build stages
}

// parseContainerfile reads the instructions this repo's Containerfile uses
// (one per line, exec forms as JSON arrays); a line continuation or shell
// form it does not expect fails the test rather than being misread.
func parseContainerfile(t *testing.T, path string) containerfile {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var c containerfile
	c.buildEnv = map[string]string{}
	stageEnv := map[string]string{}
	exec := func(line, args string) []string {
		var v []string
		if err := json.Unmarshal([]byte(args), &v); err != nil {
			t.Fatalf("Containerfile: %q: want the exec form (a JSON array): %v", line, err)
		}
		return v
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			t.Fatalf("Containerfile: %q: line continuations are not read here", line)
		}
		word, args, _ := strings.Cut(line, " ")
		switch strings.ToUpper(word) {
		case "FROM":
			for k, v := range stageEnv {
				c.buildEnv[k] = v
			}
			stageEnv = map[string]string{}
			c = containerfile{from: strings.Fields(args)[0], buildEnv: c.buildEnv}
		case "ENV":
			for _, kv := range strings.Fields(args) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					t.Fatalf("Containerfile: %q: want ENV K=V …", line)
				}
				stageEnv[k] = v
			}
		case "ENTRYPOINT":
			c.entrypoint = exec(line, args)
		case "CMD":
			c.cmd = exec(line, args)
		case "HEALTHCHECK":
			_, cmd, ok := strings.Cut(args, "CMD ")
			if !ok {
				t.Fatalf("Containerfile: %q: want HEALTHCHECK … CMD [...]", line)
			}
			c.healthcheck = exec(line, cmd)
		case "USER":
			c.user = args
		case "VOLUME":
			c.volumes = exec(line, args)
		case "EXPOSE":
			c.expose = strings.Fields(args)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	c.env = stageEnv
	return c
}

// TestContainerImage checks the Containerfile's final stage (an empty or
// distroless base, a non-root user, the /data volume, port 8080, a static
// binary built with CGO_ENABLED=0), then runs the binary built as the
// image builds it with exactly the image's entrypoint, arguments and
// environment (the /data volume and port 8080 mapped to a temporary
// directory and a free port, as a runtime maps them) and checks that it
// serves and that the image's health check passes against it. The sandbox
// cannot run containers, so this stands in for `podman run`.
func TestContainerImage(t *testing.T) {
	testenv.RequireDefault(t)
	c := parseContainerfile(t, repoFile("Containerfile"))
	if c.from != "scratch" && !strings.HasPrefix(c.from, "gcr.io/distroless/static") {
		t.Errorf("final stage FROM %s: want scratch or a distroless static base", c.from)
	}
	if c.user == "" || strings.HasPrefix(c.user, "0") || strings.HasPrefix(c.user, "root") {
		t.Errorf("USER %q: want a non-root user", c.user)
	}
	if !slices.Contains(c.volumes, "/data") || c.env["HOURGLASS_DATA_DIR"] != "/data" {
		t.Errorf("VOLUME %v, HOURGLASS_DATA_DIR %q: want the /data volume holding the database", c.volumes, c.env["HOURGLASS_DATA_DIR"])
	}
	if !slices.Contains(c.expose, "8080") || c.env["HOURGLASS_ADDR"] != "0.0.0.0:8080" {
		t.Errorf("EXPOSE %v, HOURGLASS_ADDR %q: want 8080, listened on every interface", c.expose, c.env["HOURGLASS_ADDR"])
	}
	if c.buildEnv["CGO_ENABLED"] != "0" {
		t.Errorf("build stage CGO_ENABLED=%q: want 0 (a static binary)", c.buildEnv["CGO_ENABLED"])
	}
	if len(c.entrypoint) == 0 || len(c.healthcheck) == 0 || c.healthcheck[0] != c.entrypoint[0] {
		t.Fatalf("ENTRYPOINT %v, HEALTHCHECK CMD %v: want the binary, and its healthcheck", c.entrypoint, c.healthcheck)
	}

	// The binary, built as the image builds it.
	dir := t.TempDir()
	bin := filepath.Join(dir, filepath.Base(c.entrypoint[0]))
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "github.com/hourglass/hourglass/cmd/hourglass")
	build.Env = append(os.Environ(), "CGO_ENABLED="+c.buildEnv["CGO_ENABLED"])
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s has an ELF interpreter: not static, it cannot run on %s", bin, c.from)
		}
	}
	ef.Close()

	// The runtime's mappings: the volume and the published port.
	data := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	env := []string{"PATH=/nonexistent", "HOME=/nonexistent"} // nothing of the host's
	for k, v := range c.env {
		switch k {
		case "HOURGLASS_DATA_DIR":
			v = data
		case "HOURGLASS_ADDR":
			v = addr
		}
		env = append(env, k+"="+v)
	}
	args := append(slices.Clone(c.entrypoint[1:]), c.cmd...)
	srv := exec.Command(bin, args...)
	srv.Env, srv.Dir = env, data
	logs := &strings.Builder{}
	srv.Stderr = logs
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		srv.Process.Kill()
		srv.Wait()
		if t.Failed() {
			t.Logf("server log:\n%s", logs.String())
		}
	})
	healthcheck := func() error {
		hc := exec.Command(bin, c.healthcheck[1:]...)
		hc.Env = env
		out, err := hc.CombinedOutput()
		if err != nil {
			t.Logf("healthcheck: %v: %s", err, out)
		}
		return err
	}
	testenv.EventuallyEvery(t, 30*time.Second, 200*time.Millisecond, "the image's health check passes", func() bool { return healthcheck() == nil })
	resp, err := http.Get("http://" + addr + "/v1/policies")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/policies: %d, want 200", resp.StatusCode)
	}
	entries, _ := os.ReadDir(data)
	if len(entries) == 0 {
		t.Errorf("nothing in the /data volume: the database is elsewhere")
	}

	// And the health check fails once the server is gone.
	srv.Process.Kill()
	srv.Wait()
	if healthcheck() == nil {
		t.Error("the health check passed with no server")
	}
}
