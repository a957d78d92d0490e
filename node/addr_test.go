package node_test

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/node"
	"github.com/hourglass/hourglass/store"
)

// TestAddrNeedsHostPort: --addr 8080 (no colon) is refused before the
// store opens, with the host:port to write, not a guess that another
// process holds the port; a port another process holds says so.
func TestAddrNeedsHostPort(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	for _, tt := range []struct {
		addr, debug string
		want        []string
		not         string
	}{
		{addr: "8080", want: []string{`--addr "8080"`, "host:port", ":8080", "127.0.0.1:8080"}, not: "another process"},
		{addr: "localhost", want: []string{`--addr "localhost"`, "host:port"}, not: "another process"},
		{addr: "127.0.0.1:0", debug: "6060", want: []string{`--debug-addr "6060"`, ":6060"}},
		{addr: busy.Addr().String(), want: []string{"another process"}},
	} {
		t.Run(tt.addr+"_"+tt.debug, func(t *testing.T) {
			t.Parallel()
			n, err := node.New(context.Background(), node.Config{
				Addr:      tt.addr,
				DebugAddr: tt.debug,
				Store:     store.Options{DataDir: t.TempDir()},
				TimerMax:  1000,
				Logger:    slog.New(slog.DiscardHandler),
			})
			if err == nil {
				n.Close()
				t.Fatal("node.New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if tt.not != "" && strings.Contains(err.Error(), tt.not) {
				t.Errorf("error %q says %q", err, tt.not)
			}
		})
	}
}
