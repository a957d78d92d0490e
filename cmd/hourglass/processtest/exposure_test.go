package processtest

import (
	"bufio"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPublicAddressWithoutTokenWarns: `hourglass serve` on a non-loopback
// address without --api-token logs a WARN before it listens (nothing was
// logged); on loopback, or with a token, it does not.
func TestPublicAddressWithoutTokenWarns(t *testing.T) {
	t.Parallel()
	bin := binary(t)
	for _, tt := range []struct {
		name string
		args []string
		warn bool
	}{
		{"any address, no token", []string{"--addr", "0.0.0.0:0", "--allowed-hosts", "a.example,b.example"}, true},
		{"loopback, no token", []string{"--addr", "127.0.0.1:0"}, false},
		{"any address, a token", []string{"--addr", "0.0.0.0:0", "--api-token", "tok"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, append([]string{"serve", "--data-dir", filepath.Join(t.TempDir(), "data")}, tt.args...)...)
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			var lines []string
			warned := false
			for sc := bufio.NewScanner(stderr); sc.Scan(); {
				lines = append(lines, sc.Text())
				if strings.Contains(sc.Text(), "level=WARN") && strings.Contains(sc.Text(), "without --api-token") {
					warned = true
				}
				if strings.Contains(sc.Text(), `msg="hourglass: listening"`) {
					if warned != tt.warn {
						t.Errorf("warned about the address: %v, want %v; log:\n%s", warned, tt.warn, strings.Join(lines, "\n"))
					}
					return
				}
			}
			t.Fatalf("no listening line; log:\n%s", strings.Join(lines, "\n"))
		})
	}
}
