package api_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// labelRecorder is an api.Observer that keeps every label pair it sees.
type labelRecorder struct {
	mu      sync.Mutex
	routes  map[string]bool
	methods map[string]bool
}

func (l *labelRecorder) ObserveRequest(route, method string, _ int, _ time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.routes[route] = true
	l.methods[method] = true
}

// TestMetricLabelsAreBounded: made-up methods and paths, sent without a
// token, end up as the one label "other": a client cannot grow the metrics
// (a label per unique method once took a server from 24 MB to 728 MB).
func TestMetricLabelsAreBounded(t *testing.T) {
	t.Parallel()
	rec := &labelRecorder{routes: map[string]bool{}, methods: map[string]bool{}}
	s := startServer(t, serverConfig{Token: "tok", Observer: rec})
	for i := range 50 {
		method := "X" + strings.Repeat("M", i) // a valid token, unique each time
		for _, path := range []string{"/healthz", "/readyz", "/v1/orders", "/nope/" + method, "/v1/" + method} {
			req, err := http.NewRequest(method, s.URL+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := s.HTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
		}
	}
	s.call(t, http.MethodGet, "/healthz", nil, nil)
	s.call(t, http.MethodGet, "/v1/orders/1", nil, nil)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for m := range rec.methods {
		if m != "GET" && m != "other" {
			t.Errorf("method label %q; want only known methods and \"other\"", m)
		}
	}
	for r := range rec.routes {
		if r != "other" && !strings.HasPrefix(r, "/") {
			t.Errorf("route label %q", r)
		}
		if strings.Contains(r, "XM") {
			t.Errorf("route label %q comes from the request", r)
		}
	}
	for _, want := range []string{"/healthz", "/readyz", "/v1/orders", "/v1/orders/{id}", "other"} {
		if !rec.routes[want] {
			t.Errorf("no route label %q; got %v", want, rec.routes)
		}
	}
	if len(rec.methods) != 2 {
		t.Errorf("method labels %v, want GET and other", rec.methods)
	}
}

// notReadyScheduler is a Scheduler during start-up: recovery has not run.
type notReadyScheduler struct{}

func (notReadyScheduler) Schedule(hourglass.DueItem) {}
func (notReadyScheduler) Cancel(int64)               {}
func (notReadyScheduler) Ready() bool                { return false }
func (notReadyScheduler) Healthy() error             { return nil }

// TestReadyzDuringStartUpIsNotAnError: /readyz answers 503 until recovery
// has run, which is expected: it must not log an ERROR per probe.
func TestReadyzDuringStartUpIsNotAnError(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	srv, err := api.NewServer(api.Config{Store: struct{ hourglass.Store }{}, Engine: notReadyScheduler{}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), `"unavailable"`) {
			t.Fatalf("/readyz: %d %s", w.Code, w.Body)
		}
	}
	if out := logs.String(); out != "" {
		t.Errorf("/readyz 503 during start-up logged:\n%s", out)
	}
}

// TestBodyMemoryIsBounded: request bodies held at once are bounded by
// MaxBodyMemory; a request that finds no room within api.BodyWait is a 503
// unavailable, and room comes back when the holder finishes. (500 bodies of
// 1 MiB once took a server to 611 MB.)
func TestBodyMemoryIsBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{MaxBodyMemory: api.MaxBodyBytes + api.MaxBodyBytes/2})
	// A client that sends all of a 1 MiB body but its last byte holds 1 MiB
	// (a body holds what it has sent; its bytes bought it 16 s at
	// api.MinBodyRate).
	addr := strings.TrimPrefix(s.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/products/slow HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, api.MaxBodyBytes, strings.Repeat(" ", api.MaxBodyBytes-1))
	// Wait until the slow request holds its whole reservation before
	// sending the others: sent earlier, a big body could take the room
	// first and the slow request be the one refused.
	testenv.Eventually(t, 10*time.Second, "the slow body held", func() bool {
		return api.BodyBytesHeld(s.Handler) >= api.MaxBodyBytes
	})
	big := []byte(`{"available":1,"name":"` + strings.Repeat("n", api.MaxBodyBytes-100) + `"}`)
	start := time.Now()
	status, _, raw := s.call(t, http.MethodPut, "/v1/products/big", nil, big)
	if status != http.StatusServiceUnavailable {
		t.Fatalf("big body while another is held: %d %s, want 503", status, raw)
	}
	if waited := time.Since(start); waited < api.BodyWait/2 {
		t.Errorf("refused after %s, want a wait of about %s", waited, api.BodyWait)
	}
	if !strings.Contains(string(raw), `"code":"unavailable"`) || !strings.Contains(string(raw), "request bodies in flight") {
		t.Errorf("503 body %s", raw)
	}
	if status, _, raw := s.call(t, http.MethodPut, "/v1/products/small", nil, []byte(`{"available":1}`)); status != http.StatusOK {
		t.Errorf("small body while a big one is held: %d %s", status, raw)
	}
	conn.Close() // the held request ends; its reservation comes back
	testenv.Eventually(t, 10*time.Second, "the slow body's reservation returned", func() bool {
		return api.BodyBytesHeld(s.Handler) == 0
	})
	if status, _, raw := s.call(t, http.MethodPut, "/v1/products/big", nil, big); status != http.StatusBadRequest {
		t.Errorf("big body after the other ended: %d %s, want 400 (name too long)", status, raw)
	}
}

// TestLimitConnections: with n connections open, the next one is not
// served until one closes.
func TestLimitConnections(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(api.LimitConnections(ln, 2))
	t.Cleanup(func() { srv.Close() })
	addr := ln.Addr().String()
	get := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(500 * time.Millisecond))
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			return err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	var open []net.Conn
	for i := range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := get(c); err != nil { // served, then idle (keep-alive)
			t.Fatalf("connection %d: %v", i, err)
		}
		open = append(open, c)
	}
	third, err := net.Dial("tcp", addr) // the kernel accepts it into the backlog
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if err := get(third); err == nil {
		t.Fatal("a third connection was served with two open and a limit of 2")
	}
	open[0].Close()
	fourth, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	third.Close()
	var lastErr error
	for range 20 { // the closes free a slot once the server notices them
		if lastErr = get(fourth); lastErr == nil {
			return
		}
		fourth.Close()
		if fourth, err = net.Dial("tcp", addr); err != nil {
			t.Fatal(err)
		}
		defer fourth.Close()
	}
	t.Errorf("no connection served after one of two closed: %v", lastErr)
}

// failingWritesStore is a Store whose writes fail for a storage cause.
type failingWritesStore struct{ hourglass.Store }

func (failingWritesStore) WriteHealth() error {
	return hourglass.Errorf(hourglass.CodeUnavailable, "database write failed: the disk is full (SQLITE_FULL)")
}

type readyScheduler struct{ notReadyScheduler }

func (readyScheduler) Ready() bool { return true }

// TestReadyzWhileWritesFail: /readyz is 503 naming the cause while the
// store reports failing writes (a full disk once left it 200).
func TestReadyzWhileWritesFail(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		store hourglass.Store
		want  int
	}{
		{"writes fail", failingWritesStore{}, http.StatusServiceUnavailable},
		{"store without the ability", struct{ hourglass.Store }{}, http.StatusOK},
	} {
		srv, err := api.NewServer(api.Config{Store: tt.store, Engine: readyScheduler{}, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		w := httptest.NewRecorder()
		srv.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != tt.want {
			t.Errorf("%s: /readyz %d %s, want %d", tt.name, w.Code, w.Body, tt.want)
		}
		if tt.want != http.StatusOK && !strings.Contains(w.Body.String(), "the disk is full") {
			t.Errorf("%s: /readyz body %s does not name the cause", tt.name, w.Body)
		}
	}
}

// TestDiskFullThroughTheAPI: on a full disk a create is a 503 unavailable
// naming the cause (it was a vague 500 internal), /readyz is 503 saying why
// (it stayed 200), and both recover by themselves once space is freed.
func TestDiskFullThroughTheAPI(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("mounts a tmpfs; skipped with -short")
	}
	fs := filepath.Join(t.TempDir(), "fs")
	if err := os.Mkdir(fs, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", fs).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a small tmpfs to fill (needs root or CAP_SYS_ADMIN): %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", fs).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	func() { // cleanups run last first: the server stops before the unmount
		s := startServer(t, serverConfig{Dir: filepath.Join(fs, "data")})
		s.putProduct(t, "A", "", 1_000_000)
		filler, err := os.Create(filepath.Join(fs, "filler"))
		if err != nil {
			t.Fatal(err)
		}
		for chunk := make([]byte, 4096); ; {
			if _, err := filler.Write(chunk); err != nil {
				break
			}
		}
		filler.Close()

		var status int
		var raw []byte
		for i := 0; i < 20000; i++ {
			body := fmt.Sprintf(`{"user_id":"%s","items":[{"sku":"A","quantity":1}],"timeout_ms":600000}`, strings.Repeat("u", 100))
			if status, _, raw = s.call(t, http.MethodPost, "/v1/orders", nil, []byte(body)); status != http.StatusCreated {
				break
			}
		}
		if status != http.StatusServiceUnavailable || !strings.Contains(string(raw), `"code":"unavailable"`) || !strings.Contains(string(raw), "the disk is full") {
			t.Fatalf("create on a full disk: %d %s, want 503 unavailable naming the full disk", status, raw)
		}
		if status, _, raw := s.call(t, http.MethodGet, "/readyz", nil, nil); status != http.StatusServiceUnavailable || !strings.Contains(string(raw), "the disk is full") {
			t.Errorf("/readyz on a full disk: %d %s", status, raw)
		}
		if err := os.Remove(filepath.Join(fs, "filler")); err != nil {
			t.Fatal(err)
		}
		ready := false
		defer func() {
			if !ready { // EventuallyEvery failed the test: say what /readyz said
				t.Logf("/readyz %d %s", status, raw)
			}
		}()
		testenv.EventuallyEvery(t, 10*time.Second, 50*time.Millisecond, "/readyz 200 after space was freed", func() bool {
			status, _, raw = s.call(t, http.MethodGet, "/readyz", nil, nil)
			return status == http.StatusOK
		})
		ready = true
		if status, _, raw := s.call(t, http.MethodPost, "/v1/orders", nil, []byte(`{"user_id":"u","items":[{"sku":"A","quantity":1}],"timeout_ms":600000}`)); status != http.StatusCreated {
			t.Errorf("create after space was freed: %d %s", status, raw)
		}
	}()
}
