package node

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestHTTPServerLimits: a header block over 16 KiB is refused with 431
// (the default was 1 MB); an ordinary request is served.
func TestHTTPServerLimits(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }), slog.New(slog.DiscardHandler))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/"
	for _, tt := range []struct {
		name   string
		header int
		want   int
	}{
		{"small header", 1 << 10, http.StatusOK},
		{"64 KiB header", 64 << 10, http.StatusRequestHeaderFieldsTooLarge},
	} {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		req.Header.Set("X-Pad", strings.Repeat("p", tt.header))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.name, resp.StatusCode, tt.want)
		}
	}
}
