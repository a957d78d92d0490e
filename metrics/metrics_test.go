package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestObserveRequest: the series bound on a route's first request count
// every later one, each route, method and code in its own series, from
// goroutines at once, under the names and labels they always had.
func TestObserveRequest(t *testing.T) {
	m := New(func() int { return 0 })
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				m.ObserveRequest("/v1/orders", "POST", 201, time.Millisecond)
				m.ObserveRequest("/v1/orders", "POST", 400, 2*time.Millisecond)
				m.ObserveRequest("/v1/orders/{id}", "GET", 200, time.Millisecond)
			}
		})
	}
	wg.Wait()
	w := httptest.NewRecorder()
	m.Handler().ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(w.Result().Body)
	var lines []string
	for l := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(l, "hourglass_http_request") && !strings.Contains(l, "_bucket{") {
			lines = append(lines, l)
		}
	}
	got := strings.Join(lines, "\n")
	for _, l := range []string{
		`hourglass_http_requests_total{code="200",method="GET",route="/v1/orders/{id}"} 800`,
		`hourglass_http_requests_total{code="201",method="POST",route="/v1/orders"} 800`,
		`hourglass_http_requests_total{code="400",method="POST",route="/v1/orders"} 800`,
		`hourglass_http_request_duration_seconds_count{method="GET",route="/v1/orders/{id}"} 800`,
		`hourglass_http_request_duration_seconds_count{method="POST",route="/v1/orders"} 1600`,
	} {
		if !strings.Contains(got, l+"\n") && !strings.HasSuffix(got, l) {
			t.Errorf("no line %s in:\n%s", l, got)
		}
	}
	if n := strings.Count(got, "hourglass_http_requests_total{"); n != 3 {
		t.Errorf("%d series of hourglass_http_requests_total, want 3:\n%s", n, got)
	}
}
