package processtest

import (
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// TestDebugAddr: --debug-addr serves the runtime profiles on its own
// listener; the API's listener does not.
func TestDebugAddr(t *testing.T) {
	dir := t.TempDir()
	bin := binary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	debugAddr := ln.Addr().String()
	ln.Close()
	p := startHourglass(t, "debug", bin, filepath.Join(dir, "data"), "--debug-addr", debugAddr)
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("http://" + debugAddr + "/debug/pprof/cmdline"); code != http.StatusOK || !strings.Contains(body, "--debug-addr") {
		t.Errorf("GET /debug/pprof/cmdline on --debug-addr = %d %q; want 200 with the command line", code, body)
	}
	if code, _ := get("http://" + debugAddr + "/debug/pprof/heap?debug=1"); code != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap on --debug-addr = %d; want 200", code)
	}
	if code, _ := get(p.url + "/debug/pprof/cmdline"); code == http.StatusOK {
		t.Errorf("the API's listener serves /debug/pprof/cmdline; want it only on --debug-addr")
	}
}
