package api

import (
	"context"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/dashboard"
)

// DashboardSource is what the dashboard routes need: the data of
// GET /v1/dashboard (a *dashboard.Source). Snapshot must be safe for
// concurrent use; its errors are answered as 500s (or 503 when ctx ended).
type DashboardSource interface {
	Snapshot(ctx context.Context, now time.Time) (*dashboard.Snapshot, error)
}

// dashboardRoutes returns the dashboard's data route, GET /v1/dashboard
// (behind the token like every /v1 route), and registers its page: GET / and
// the files it loads under /dashboard/, embedded in the binary and public
// (they hold no data). Without a DashboardSource there is none of them and
// / stays a JSON 404.
func (s *Server) dashboardRoutes() []route {
	if s.cfg.Dashboard == nil {
		return nil
	}
	assets := dashboard.Assets()
	// "/{$}" matches "/" only, so the catch-all "/" keeps answering the JSON
	// 404 for every other path.
	s.mux.Handle("GET /{$}", s.asset(assets, "index.html"))
	s.mux.Handle("/{$}", s.wrap("/", false, func(r *http.Request, _ []byte) (int, any, error) {
		return 0, nil, &methodError{allow: "GET, HEAD", method: r.Method}
	}))
	entries, _ := fs.ReadDir(assets, ".") // an embedded directory: cannot fail
	for _, e := range entries {
		if e.IsDir() || e.Name() == "index.html" {
			continue
		}
		s.mux.Handle("GET /dashboard/"+e.Name(), s.asset(assets, e.Name()))
	}
	return []route{{"GET", "/v1/dashboard", s.getDashboard}}
}

// asset serves one embedded file with headers that keep the page to its own
// origin: a strict Content-Security-Policy (no inline script, no other
// host), no framing, no referrer (the address may hold ?token=).
func (s *Server) asset(assets fs.FS, name string) http.Handler {
	body, err := fs.ReadFile(assets, name)
	if err != nil {
		panic("api: embedded dashboard file " + name + " missing: " + err.Error()) // a build error
	}
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	route := "/dashboard/" + name
	if name == "index.html" {
		route = "/"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now()
		h := w.Header()
		h.Set("Content-Type", ctype)
		h.Set("Content-Length", strconv.Itoa(len(body)))
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			w.Write(body)
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.ObserveRequest(route, MethodLabel(r.Method), http.StatusOK, s.clock.Now().Sub(start))
		}
	})
}

// getDashboard serves GET /v1/dashboard: the dashboard.Snapshot JSON.
func (s *Server) getDashboard(r *http.Request, _ []byte) (int, any, error) {
	if len(r.URL.Query()) > 0 {
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "GET /v1/dashboard takes no query parameters")
	}
	snap, err := s.cfg.Dashboard.Snapshot(r.Context(), s.clock.Now())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, snap, nil
}
