package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
	"github.com/hourglass/hourglass/internal/testenv"
)

// TestSlowBodiesDoNotHoldTheBudget: 64 connections that announce a 1 MiB
// body and trickle it (one byte every 100 ms) once held the whole 64 MiB
// body budget for the 30 s read timeout, and every POST and PUT, pay
// included, got 503 meanwhile. Now a body holds what it has sent, and one
// slower than api.MinBodyRate after api.BodyGrace is cut with 408: pays
// from another client answer 200 within 2 s throughout.
func TestSlowBodiesDoNotHoldTheBudget(t *testing.T) {
	onEveryStore(t, testSlowBodiesDoNotHoldTheBudget)
}

func testSlowBodiesDoNotHoldTheBudget(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	s.putProduct(t, "slow-1", "", 10)
	o := s.createOrder(t, `{"user_id":"u-1","items":[{"sku":"slow-1","quantity":1}],"timeout_ms":600000}`)
	addr := strings.TrimPrefix(s.URL, "http://")

	const slow = 64
	type cut struct {
		status string
		after  time.Duration
		err    error
	}
	cuts := make(chan cut, slow)
	stop := make(chan struct{})
	var trickling sync.WaitGroup
	for range slow {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		start := time.Now()
		fmt.Fprintf(conn, "POST /v1/orders HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", addr, api.MaxBodyBytes)
		trickling.Add(1)
		go func() { // one byte every 100 ms until the server cuts it
			defer trickling.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		}()
		go func() {
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				cuts <- cut{err: err, after: time.Since(start)}
				return
			}
			body, _ := io.ReadAll(resp.Body)
			cuts <- cut{status: resp.Status + " " + string(body), after: time.Since(start)}
		}()
	}
	defer func() { close(stop); trickling.Wait() }()

	// Pays from another client, for 3 s: each answers 200 within 2 s.
	paying := time.Now()
	for i := 0; i < 30; i++ { // one every 100 ms
		testenv.Until(t.Context(), paying.Add(time.Duration(i)*100*time.Millisecond))
		start := time.Now()
		status, _, raw := s.call(t, http.MethodPost, fmt.Sprintf("/v1/orders/%d/pay", o.ID), nil, []byte(`{"payment_id":"pay-1"}`))
		took := time.Since(start)
		// 2 s, not 1: in go test -race ./... at -p 4 on 2 cores one pay
		// took 1.3 s (CI, 2026-12-06); a held budget keeps pays waiting
		// until the trickles are cut, 10 s and more.
		if status != http.StatusOK || took > 2*time.Second {
			t.Fatalf("pay while %d bodies trickle: %d in %s, want 200 within 2s; body %s", slow, status, took, raw)
		}
	}
	// Every trickling request was cut with a 408 request_timeout, soon
	// after its grace.
	for range slow {
		c := <-cuts
		if c.err != nil {
			t.Errorf("slow body: no answer after %s: %v", c.after, c.err)
			continue
		}
		if !strings.HasPrefix(c.status, "408 ") || !strings.Contains(c.status, `"code":"request_timeout"`) {
			t.Errorf("slow body: answered %q, want 408 request_timeout", c.status)
		}
		if c.after > api.BodyGrace+2*time.Second {
			t.Errorf("slow body cut after %s, want about %s", c.after, api.BodyGrace)
		}
	}
}

// TestBodyAtTheRateIsRead: a body that keeps above api.MinBodyRate is read
// whole however long it takes past api.BodyGrace, and one that pauses after
// a fast start is allowed the time its bytes bought.
func TestBodyAtTheRateIsRead(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	body := []byte(`{"available":1,"name":"` + strings.Repeat("n", 200<<10) + `"}`)
	addr := strings.TrimPrefix(s.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/products/paced HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", addr, len(body))
	// 128 KiB at once, then 1.5 s of nothing (the grace plus the second
	// the first 64 KiB bought), then the rest at twice the rate.
	conn.Write(body[:128<<10])
	testenv.Phase(t, 1500*time.Millisecond, "the body pauses (the grace plus the second its first 64 KiB bought)")
	resumed := time.Now()
	for i, rest := 0, body[128<<10:]; len(rest) > 0; i++ {
		testenv.Until(t.Context(), resumed.Add(time.Duration(i)*125*time.Millisecond)) // 16 KiB every 125 ms
		n := min(len(rest), 16<<10)
		if _, err := conn.Write(rest[:n]); err != nil {
			t.Fatal(err)
		}
		rest = rest[n:]
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	// 400: the name is too long — the body was read and decoded.
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(raw), "name") {
		t.Errorf("paced body: %d %s, want 400 about the name", resp.StatusCode, raw)
	}
}

// TestListPagesAreBounded: GET /v1/timers?limit=1000 over 1,000 timers of
// 64 KiB payloads once built a 65 MB response in memory. Now a page stops
// before api.MaxPageBytes and names the next, and following next sees
// every timer exactly once. 200 such timers (12.5 MiB, a page of at most 4
// MiB holds 63) show it as well as 1,000 did, in a fifth of the time (41 s
// under -race, the slowest test of the package).
func TestListPagesAreBounded(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	// Just over one page's worth (4.5 MiB of payloads against pages of
	// 4 MiB): unbounded, limit=1000 would answer them in one page.
	const timers = 72
	payload := `{"p":"` + strings.Repeat("x", hourglass.MaxTimerPayload-len(`{"p":""}`)) + `"}`
	armTimers(t, s, timers, payload)
	pages := listAllTimers(t, s, "/v1/timers?limit=1000", api.MaxPageBytes, timers)
	if pages < 2 {
		t.Errorf("%d timers of 64 KiB in %d page(s), want pages of at most 4 MiB", timers, pages)
	}
}

// TestListPagesHoldTheBudget: a page's bytes are held in the same budget as
// request bodies: with a budget of 1 MiB, pages stop where it has no room,
// and every timer is still seen once.
func TestListPagesHoldTheBudget(t *testing.T) { onEveryStore(t, testListPagesHoldTheBudget) }

func testListPagesHoldTheBudget(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{MaxBodyMemory: 1 << 20})
	const timers = 40
	payload := `{"p":"` + strings.Repeat("x", hourglass.MaxTimerPayload-len(`{"p":""}`)) + `"}`
	armTimers(t, s, timers, payload)
	listAllTimers(t, s, "/v1/timers?limit=1000", 1<<20, timers)
}

// armTimers arms n timers, due in an hour, with the payload, 8 at a time.
func armTimers(t *testing.T, s *testServer, n int, payload string) {
	t.Helper()
	body := []byte(`{"delay_ms":3600000,"payload":` + payload + `}`)
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range keys {
				if status, _, raw := s.call(t, http.MethodPut, fmt.Sprintf("/v1/timers/t-%04d", i), nil, body); status != http.StatusCreated {
					t.Errorf("arm timer %d: %d %.200s", i, status, raw)
				}
			}
		})
	}
	for i := range n {
		keys <- i
	}
	close(keys)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// listAllTimers follows next from path and checks that every page is at
// most maxBytes, that every page but the last names a next, and that the
// timers t-0000 … are each seen once. It returns the number of pages.
func listAllTimers(t *testing.T, s *testServer, path string, maxBytes, want int) int {
	t.Helper()
	seen := map[string]int{}
	pages := 0
	for {
		status, _, raw := s.call(t, http.MethodGet, path, nil, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %.300s", path, status, raw)
		}
		pages++
		if len(raw) > maxBytes {
			t.Errorf("GET %s: page of %d bytes, want at most %d", path, len(raw), maxBytes)
		}
		var page struct {
			Timers []api.TimerJSON `json:"timers"`
			Next   *string         `json:"next"`
		}
		if err := json.Unmarshal(raw, &page); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		if len(page.Timers) == 0 {
			t.Fatalf("GET %s: an empty page", path)
		}
		for _, tm := range page.Timers {
			seen[tm.Key]++
		}
		if page.Next == nil {
			break
		}
		if *page.Next != page.Timers[len(page.Timers)-1].Key {
			t.Errorf("GET %s: next %q, want the page's last key %q", path, *page.Next, page.Timers[len(page.Timers)-1].Key)
		}
		if pages > want {
			t.Fatalf("more pages than timers")
		}
		path = "/v1/timers?limit=1000&after=" + *page.Next
	}
	for i := range want {
		if k := fmt.Sprintf("t-%04d", i); seen[k] != 1 {
			t.Errorf("timer %s seen %d times, want once", k, seen[k])
		}
	}
	if len(seen) != want {
		t.Errorf("%d timers seen, want %d", len(seen), want)
	}
	return pages
}

// TestCrossOriginRequestsAreRefused: a web page on another site could post
// a form to a token-less instance (no content-type or origin check). Now
// cross-origin browser requests to /v1 get 403 forbidden in the API's
// error envelope; clients that send no Sec-Fetch-Site or Origin (curl,
// servers) and same-origin pages (the dashboard) pass.
func TestCrossOriginRequestsAreRefused(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"", "tok"} {
		s := startServer(t, serverConfig{Token: token})
		s.putProduct(t, "x-1", "", 100)
		order := []byte(`{"user_id":"u-1","items":[{"sku":"x-1","quantity":1}],"timeout_ms":60000}`)
		for _, tt := range []struct {
			name, method, path string
			header             http.Header
			body               []byte
			want               int
		}{
			{"cross-site form post", "POST", "/v1/orders", http.Header{
				"Sec-Fetch-Site": {"cross-site"}, "Origin": {"https://evil.example"},
				"Content-Type": {"application/x-www-form-urlencoded"}}, []byte("user_id=u-1"), http.StatusForbidden},
			{"cross-site json post", "POST", "/v1/orders", http.Header{"Sec-Fetch-Site": {"cross-site"}}, order, http.StatusForbidden},
			{"same-site post", "POST", "/v1/orders", http.Header{"Sec-Fetch-Site": {"same-site"}}, order, http.StatusForbidden},
			{"cross-origin post, Origin only", "POST", "/v1/orders", http.Header{"Origin": {"https://evil.example"}}, order, http.StatusForbidden},
			{"cross-site get", "GET", "/v1/orders", http.Header{"Sec-Fetch-Site": {"cross-site"}}, nil, http.StatusForbidden},
			{"cross-site delete", "DELETE", "/v1/timers/k", http.Header{"Sec-Fetch-Site": {"cross-site"}}, nil, http.StatusForbidden},
			{"same-origin post", "POST", "/v1/orders", http.Header{"Sec-Fetch-Site": {"same-origin"}}, order, http.StatusCreated},
			{"same-origin post, Origin only", "POST", "/v1/orders", http.Header{"Origin": {s.URL}}, order, http.StatusCreated},
			{"typed in the address bar", "GET", "/v1/orders", http.Header{"Sec-Fetch-Site": {"none"}}, nil, http.StatusOK},
			{"curl", "POST", "/v1/orders", nil, order, http.StatusCreated},
			{"cross-site probe", "GET", "/healthz", http.Header{"Sec-Fetch-Site": {"cross-site"}}, nil, http.StatusOK},
		} {
			what := fmt.Sprintf("token %q, %s", token, tt.name)
			status, _, raw := s.call(t, tt.method, tt.path, tt.header, tt.body)
			if tt.want == http.StatusForbidden {
				checkError(t, what, status, raw, http.StatusForbidden, "forbidden")
			} else if status != tt.want {
				t.Errorf("%s: %d %s, want %d", what, status, raw, tt.want)
			}
		}
	}
}

// TestRebindingHostIsRefused: without a token, any Host was accepted, so a
// page whose name was rebound to the server's address had full read and
// write access. Now, without a token, a /v1 request's Host must be an IP
// address, localhost or an allowed host; with a token it is not checked.
func TestRebindingHostIsRefused(t *testing.T) {
	t.Parallel()
	open := startServer(t, serverConfig{AllowedHosts: []string{"Hourglass.Internal"}})
	withToken := startServer(t, serverConfig{Token: "tok"})
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(open.URL, "http://"))
	for _, tt := range []struct {
		name   string
		s      *testServer
		method string
		path   string
		host   string
		want   int
	}{
		{"rebinding get", open, "GET", "/v1/orders", "evil.example:8080", http.StatusForbidden},
		{"rebinding post", open, "POST", "/v1/orders", "evil.example:8080", http.StatusForbidden},
		{"rebinding, no port", open, "GET", "/v1/orders", "evil.example", http.StatusForbidden},
		{"a name ending like localhost", open, "GET", "/v1/orders", "evil-localhost:" + port, http.StatusForbidden},
		{"a subdomain of an allowed host", open, "GET", "/v1/orders", "x.hourglass.internal:" + port, http.StatusForbidden},
		{"rebinding miss", open, "GET", "/v1/nope", "evil.example:8080", http.StatusForbidden},
		{"IPv4", open, "GET", "/v1/orders", "127.0.0.1:" + port, http.StatusOK},
		{"IPv6", open, "GET", "/v1/orders", "[::1]:" + port, http.StatusOK},
		{"localhost", open, "GET", "/v1/orders", "localhost:" + port, http.StatusOK},
		{"LOCALHOST.", open, "GET", "/v1/orders", "LOCALHOST.:" + port, http.StatusOK},
		{"allowed host", open, "GET", "/v1/orders", "hourglass.internal:" + port, http.StatusOK},
		{"allowed host, other case, no port", open, "GET", "/v1/orders", "HOURGLASS.internal", http.StatusOK},
		{"probe by any name", open, "GET", "/healthz", "evil.example:8080", http.StatusOK},
		{"token: Host not checked", withToken, "GET", "/v1/orders", "evil.example:8080", http.StatusOK},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tt.method, tt.s.URL+tt.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tt.host
		if tt.s.Token != "" {
			req.Header.Set("Authorization", "Bearer "+tt.s.Token)
		}
		resp, err := tt.s.HTTP.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if tt.want == http.StatusForbidden {
			checkError(t, tt.name, resp.StatusCode, raw, http.StatusForbidden, "forbidden")
		} else if resp.StatusCode != tt.want {
			t.Errorf("%s: %d %s, want %d", tt.name, resp.StatusCode, raw, tt.want)
		}
	}
}

// TestAllowedHostsAreChecked: NewServer refuses an allowed host that is not
// a host name.
func TestAllowedHostsAreChecked(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"", " ", "host:8080", "http://host", "host/x", "a b"} {
		_, err := api.NewServer(api.Config{Store: failingWritesStore{}, Engine: notReadyScheduler{}, AllowedHosts: []string{"ok.example", h}})
		if err == nil || !strings.Contains(err.Error(), "AllowedHosts[1]") {
			t.Errorf("AllowedHosts %q: error %v, want one naming AllowedHosts[1]", h, err)
		}
	}
	if _, err := api.NewServer(api.Config{Store: failingWritesStore{}, Engine: notReadyScheduler{}, AllowedHosts: []string{"Hourglass.Internal.", "h_1"}}); err != nil {
		t.Errorf("valid AllowedHosts: %v", err)
	}
}

// TestSlowSmallBodyIsCut: a trickled body small enough for the server to
// discard the rest of before answering is cut as promptly as a large one.
func TestSlowSmallBodyIsCut(t *testing.T) {
	t.Parallel()
	s := startServer(t, serverConfig{})
	addr := strings.TrimPrefix(s.URL, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "PUT /v1/products/small HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", addr)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer after %s: %v", time.Since(start), err)
	}
	if took := time.Since(start); resp.StatusCode != http.StatusRequestTimeout || took > api.BodyGrace+2*time.Second {
		t.Errorf("slow small body: %d after %s, want 408 after about %s", resp.StatusCode, took, api.BodyGrace)
	}
}
