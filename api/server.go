// Package api is hourglass's HTTP API (v1, JSON) and its Go client.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Engine is what the API needs of the close path: whether it is ready, for
// /readyz. The API does not tell it what is due: the store announces every
// commit to it (hourglass.DueFeed).
type Engine interface {
	// Ready reports whether recovery has run.
	Ready() bool
	// Healthy returns nil, or why the delay mechanism is degraded.
	Healthy() error
}

// WriteHealthReporter is an optional ability of a Store: WriteHealth returns
// why writes are failing now (the disk is full, read-only, I/O errors), or
// nil while they commit. While it is not nil, /readyz answers 503 with its
// message.
type WriteHealthReporter interface {
	WriteHealth() error
}

// Observer records requests for metrics.
type Observer interface {
	ObserveRequest(route, method string, code int, d time.Duration)
}

// Config configures a Server. Store and Engine are required.
type Config struct {
	Store  hourglass.Store
	Engine Engine
	Clock  hourglass.Clock
	Logger *slog.Logger
	// Tokens (--api-token), when set, are the operators' tokens: every /v1
	// route needs one of them, or one of ViewerTokens, as
	// "Authorization: Bearer <token>" (401 unauthorized otherwise). Several
	// are accepted at once, so a token can be rotated without a restart of
	// the clients. Without any, a /v1 request's Host must be an IP address,
	// localhost, or one of AllowedHosts (403 forbidden otherwise), so a web
	// page cannot reach the API through DNS rebinding.
	Tokens []string
	// ViewerTokens (--viewer-token) read every /v1 route and write none:
	// with one, a request whose method is not GET or HEAD is answered 403
	// forbidden. They need Tokens. NewServer refuses an empty token, a
	// token with white space at either end or a control character, and a
	// token in both lists (CheckTokens).
	ViewerTokens []string
	// AllowedHosts are the host names (without port, case-insensitive) a
	// /v1 request may name in its Host header when there is no token, beside
	// IP addresses and localhost. NewServer refuses an empty name, a port or
	// a character a host name does not have.
	AllowedHosts []string
	Observer     Observer
	// Metrics serves GET /metrics when set.
	Metrics http.Handler
	// Webhooks serves /v1/webhooks and /v1/deadletters when set (webhooks.go).
	Webhooks WebhookService
	// Dashboard serves the dashboard at / when set (dashboard.go).
	Dashboard DashboardSource
	// Cluster serves GET /v1/cluster when set (cluster.go).
	Cluster ClusterSource
	// Sources serves GET /v1/sources/{name}/bad-rows when set (sources.go).
	Sources SourceBadRows
	// Timers serves /v1/timers when set (timers.go).
	Timers hourglass.TimerStore
	// History serves the history routes when set (history.go): the
	// orders', the timers' with Timers, the source rows' (and their
	// list) with SourceRows.
	History    HistorySource
	SourceRows SourceRows
	// Bulk serves /v1/bulk-actions and, with Timers, POST /v1/timers/batch
	// when set (bulk.go); BulkWake, if set, is called after a filtered
	// action was created (the node's runner claims it at once).
	Bulk     BulkBackend
	BulkWake func()
	// TimerRequests serves GET /v1/timer-requests/rejected when set
	// (timer_requests.go): the store applies timer requests.
	TimerRequests hourglass.TimerRequestStore
	// MaxBodyMemory bounds the bytes requests hold at once, request bodies
	// and responses alike (default MaxBodyMemoryDefault). A body is reserved
	// as it arrives, in steps of at most 64 KiB (so a client holds what it
	// has sent, not what it announced), and a response before it is
	// written; a list page stops growing where the budget has no room. A
	// request that finds no room within BodyWait is answered 503
	// unavailable.
	MaxBodyMemory int64
}

// Defaults of Config.
const (
	// MaxBodyMemoryDefault is 64 bodies of the largest size, or hundreds of
	// thousands of ordinary ones.
	MaxBodyMemoryDefault = 64 * MaxBodyBytes
	// BodyWait is how long a request waits for room in MaxBodyMemory.
	BodyWait = 2 * time.Second
)

// Server serves the API. It is safe for concurrent use.
type Server struct {
	cfg    Config
	clock  hourglass.Clock
	log    *slog.Logger
	mux    *http.ServeMux
	bodies *byteBudget
	// cross refuses unsafe cross-origin browser requests (Sec-Fetch-Site,
	// or Origin against Host).
	cross *http.CrossOriginProtection
	hosts []string // AllowedHosts, normalised
	// tokens are the SHA-256 digests of Tokens and ViewerTokens, which
	// every request's is compared with in constant time.
	tokens []tokenDigest
	// registered are the routes registered on mux (Routes).
	registered []Route
	// jsonType is every answer's Content-Type value, one slice shared by
	// their headers (net/http only reads it).
	jsonType []string
}

// NewServer returns a server; Handler returns its http.Handler.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Engine == nil {
		return nil, errors.New("api: Store and Engine are required")
	}
	if cfg.MaxBodyMemory < 0 {
		return nil, errors.New("api: MaxBodyMemory must not be negative")
	}
	hosts, err := normalizeHosts(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	if err := CheckTokens(cfg.Tokens, cfg.ViewerTokens); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, mux: http.NewServeMux(),
		bodies: newByteBudget(cmp.Or(cfg.MaxBodyMemory, MaxBodyMemoryDefault)),
		cross:  http.NewCrossOriginProtection(), hosts: hosts, tokens: digestTokens(cfg.Tokens, cfg.ViewerTokens),
		jsonType: []string{"application/json"}}
	if s.clock == nil {
		s.clock = hourglass.SystemClock{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.routes()
	return s, nil
}

// route is one method and path pattern of the API, with its handler. Every
// route under /v1 requires the token when one is configured (or, without
// one, an allowed Host) and refuses cross-origin browser requests.
type route struct {
	method, path string
	h            handlerFunc
}

// handlerFunc is a route handler that returns its response value and status,
// or an error rendered by the error table.
type handlerFunc func(r *http.Request, body []byte) (status int, v any, err error)

func (s *Server) routes() {
	// Each path is registered for its methods and once without a method,
	// so a wrong method gets a JSON 405 rather than the mux's plain text.
	routes := []route{
		{"PUT", "/v1/products/{sku}", s.putProduct},
		{"GET", "/v1/products/{sku}", s.getProduct},
		{"POST", "/v1/orders", s.createOrder},
		{"GET", "/v1/orders", s.listOrders},
		{"GET", "/v1/orders/{id}", s.getOrder},
		{"POST", "/v1/orders/{id}/pay", s.payOrder},
		{"POST", "/v1/orders/{id}/extend", s.extendOrder},
		{"POST", "/v1/orders/{id}/cancel", s.transition(hourglass.ActionCancel)},
		{"POST", "/v1/orders/{id}/ship", s.transition(hourglass.ActionShip)},
		{"POST", "/v1/orders/{id}/complete", s.transition(hourglass.ActionComplete)},
		{"GET", "/v1/policies", s.getPolicy},
		{"PUT", "/v1/policies", s.putPolicy},
	}
	routes = append(routes, s.webhookRoutes()...)
	routes = append(routes, s.dashboardRoutes()...)
	routes = append(routes, s.clusterRoutes()...)
	routes = append(routes, s.timerRoutes()...)
	routes = append(routes, s.timerRequestRoutes()...)
	routes = append(routes, s.sourceRoutes()...)
	routes = append(routes, s.historyRoutes()...)
	routes = append(routes, s.whoamiRoutes()...)
	routes = append(routes, s.bulkRoutes()...)
	allowed := map[string][]string{}
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt.path, true, rt.h))
		allowed[rt.path] = append(allowed[rt.path], rt.method)
		s.registered = append(s.registered, Route{rt.method, rt.path})
	}
	for path, methods := range allowed {
		allow := strings.Join(methods, ", ")
		h := s.wrap(path, true, func(r *http.Request, _ []byte) (int, any, error) {
			return 0, nil, &methodError{allow: allow, method: r.Method}
		})
		if !withinAnother(path, allowed) {
			s.mux.Handle(path, h)
			continue
		}
		// A path another route's pattern also matches (/v1/timers/batch,
		// /v1/timers/{key}) leaves that route its methods: a 405 for the
		// others only.
		for _, m := range []string{http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
			if !slices.Contains(methods, m) && !slices.Contains(allowed[patternOf(path, allowed)], m) {
				s.mux.Handle(m+" "+path, h)
			}
		}
	}
	probes := []string{"/healthz", "/readyz", OpenAPIPath}
	if s.cfg.Metrics != nil {
		probes = append(probes, "/metrics")
	}
	for _, p := range probes {
		s.mux.Handle(p, s.wrap(p, false, func(r *http.Request, _ []byte) (int, any, error) {
			return 0, nil, &methodError{allow: "GET", method: r.Method}
		}))
		s.registered = append(s.registered, Route{http.MethodGet, p})
	}
	// Public like /metrics: the document describes the API, holds no data.
	s.mux.Handle("GET "+OpenAPIPath, s.wrap(OpenAPIPath, false, s.getOpenAPI))
	s.mux.Handle("GET /healthz", s.wrap("/healthz", false, func(*http.Request, []byte) (int, any, error) {
		return http.StatusOK, map[string]string{"status": "ok"}, nil
	}))
	s.mux.Handle("GET /readyz", s.wrap("/readyz", false, func(*http.Request, []byte) (int, any, error) {
		if !s.cfg.Engine.Ready() {
			return 0, nil, notReady{hourglass.Errorf(hourglass.CodeUnavailable, "recovery has not finished")}
		}
		if err := s.cfg.Engine.Healthy(); err != nil {
			return 0, nil, notReady{hourglass.Errorf(hourglass.CodeUnavailable, "%s", err.Error())}
		}
		if wh, ok := s.cfg.Store.(WriteHealthReporter); ok {
			if err := wh.WriteHealth(); err != nil {
				return 0, nil, notReady{hourglass.Errorf(hourglass.CodeUnavailable, "%s", hourglass.ErrorMessage(err))}
			}
		}
		return http.StatusOK, map[string]string{"status": "ready"}, nil
	}))
	if s.cfg.Metrics != nil {
		s.mux.Handle("GET /metrics", s.cfg.Metrics)
	}
	notFound := func(r *http.Request, _ []byte) (int, any, error) {
		return 0, nil, hourglass.Errorf(hourglass.CodeNotFound, "no route for %s %s", r.Method, r.URL.Path)
	}
	// Under /v1 even a miss needs the token, so the API's shape is not
	// disclosed to anonymous callers.
	s.mux.Handle("/v1/", s.wrap(OtherLabel, true, notFound))
	s.mux.Handle("/", s.wrap(OtherLabel, false, notFound))
}

// withinAnother reports whether another path of paths, one with a
// wildcard segment, matches path too.
func withinAnother(path string, paths map[string][]string) bool {
	return patternOf(path, paths) != ""
}

// patternOf returns the other path of paths whose pattern matches path
// ("" for none).
func patternOf(path string, paths map[string][]string) string {
	segs := strings.Split(path, "/")
	for other := range paths {
		if other == path {
			continue
		}
		os := strings.Split(other, "/")
		if len(os) != len(segs) {
			continue
		}
		match := true
		for i := range os {
			if os[i] != segs[i] && !strings.HasPrefix(os[i], "{") {
				match = false
				break
			}
		}
		if match {
			return other
		}
	}
	return ""
}

// notReady is /readyz's 503: an answer to a probe, expected during start-up
// and outages (whose causes are logged where they happen), so it is not
// logged as a failed request.
type notReady struct{ error }

func (e notReady) Unwrap() error { return e.error }

type methodError struct{ allow, method string }

func (e *methodError) Error() string {
	return "method " + e.method + " not allowed; allowed: " + e.allow
}

// Handler returns the root handler.
func (s *Server) Handler() http.Handler { return rootHandler{s} }

// rootHandler is Handler's result: the mux, with its server at hand for the
// tests (export_test.go).
type rootHandler struct{ s *Server }

func (h rootHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.s.mux.ServeHTTP(w, r) }

// wrap adds authentication, the origin and Host checks, the body limit,
// the byte budget, error rendering and metrics.
func (s *Server) wrap(route string, auth bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now()
		holds := &requestHolds{response: hold{budget: s.bodies}, body: hold{budget: s.bodies}}
		held := &holds.response
		defer held.releaseAll()
		r = r.WithContext(context.WithValue(r.Context(), holdKey{}, held))
		status, v, err := s.serve(w, r, auth, h, &holds.body)
		var b []byte
		if err == nil {
			b, err = s.encodeHeld(r, held, v)
		}
		if err != nil {
			status, v = s.renderError(w, r, err)
			b = encodeJSON(v)
		}
		s.writeJSON(w, status, b)
		if s.cfg.Observer != nil {
			s.cfg.Observer.ObserveRequest(route, MethodLabel(r.Method), status, s.clock.Now().Sub(start))
		}
	})
}

// OtherLabel is the route and method label of a request whose route or
// method is not one of the API's: labels come from a fixed set, so a client
// cannot grow the metrics by sending made-up methods or paths.
const OtherLabel = "other"

// MethodLabel returns method if it is a standard HTTP method, else
// OtherLabel. The method is compared as sent (methods are case-sensitive).
func MethodLabel(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return method
	}
	return OtherLabel
}

// requestHolds are one request's holds in the byte budget, allocated
// together: its response's, held until the answer is written, and its
// body's, until the handler returns.
type requestHolds struct{ response, body hold }

func (s *Server) serve(w http.ResponseWriter, r *http.Request, auth bool, h handlerFunc, bodyHeld *hold) (status int, v any, err error) {
	defer func() {
		// A panic in a handler is a bug; answer 500 rather than drop the
		// connection, and log it with the stack's first line.
		if p := recover(); p != nil {
			s.log.Error("api: panic in handler", "method", r.Method, "path", r.URL.Path, "panic", p)
			status, v, err = 0, nil, errors.New("panic")
		}
	}()
	if auth {
		if err := s.sameOrigin(r); err != nil {
			return 0, nil, err
		}
		if len(s.tokens) == 0 {
			if !s.hostAllowed(r.Host) {
				return 0, nil, hourglass.Errorf(hourglass.CodeForbidden, "Host %q is not allowed: without an API token, the Host must be an IP address, localhost, or one of the allowed hosts", r.Host)
			}
		} else {
			role := s.role(r)
			if role == roleNone {
				return 0, nil, hourglass.Errorf(hourglass.CodeUnauthorized, "missing or wrong bearer token in the Authorization header")
			}
			// Any method but GET and HEAD is a write, on any /v1 path,
			// known or not, before its body is read.
			if role == roleViewer && r.Method != http.MethodGet && r.Method != http.MethodHead {
				return 0, nil, hourglass.Errorf(hourglass.CodeForbidden, "this token is a viewer's: it reads and cannot write (%s is a write; use an API token)", MethodLabel(r.Method))
			}
		}
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet {
		// The body's bytes are held until the handler returns; the
		// response's, until it is written.
		defer bodyHeld.releaseAll()
		if body, err = readBody(w, r, bodyHeld); err != nil {
			return 0, nil, err
		}
	}
	return h(r, body)
}

// sameOrigin refuses a cross-origin browser request: any whose
// Sec-Fetch-Site is cross-site or same-site (GETs included: the API has no
// reason to be read by another site's page), and unsafe methods that
// http.CrossOriginProtection refuses (for browsers that send Origin but not
// Sec-Fetch-Site, Origin against Host). Clients that send neither header,
// curl and servers, pass. Errors: forbidden.
func (s *Server) sameOrigin(r *http.Request) error {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none": // none: typed in the address bar
	default:
		return hourglass.Errorf(hourglass.CodeForbidden, "cross-origin request refused (Sec-Fetch-Site: %s): the API is not for other sites' pages", site)
	}
	if err := s.cross.Check(r); err != nil {
		return hourglass.Errorf(hourglass.CodeForbidden, "cross-origin request refused (Origin %q, Host %q): the API is not for other sites' pages", r.Header.Get("Origin"), r.Host)
	}
	return nil
}

// hostAllowed reports whether host, a Host header, is an IP address,
// localhost or one of AllowedHosts: names a DNS-rebinding page cannot use,
// since its own name is not among them.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")), ".")
	if host == "" {
		return false
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return host == "localhost" || slices.Contains(s.hosts, host)
}

// normalizeHosts checks AllowedHosts and returns them lower-cased, without
// a trailing dot.
func normalizeHosts(hosts []string) ([]string, error) {
	out := make([]string, 0, len(hosts))
	for i, h := range hosts {
		n := strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if n == "" || strings.ContainsFunc(n, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_')
		}) {
			return nil, fmt.Errorf("api: AllowedHosts[%d] %q: want a host name (letters, digits, '-', '.', '_'; no port, no scheme)", i, h)
		}
		out = append(out, n)
	}
	return out, nil
}

func (s *Server) renderError(w http.ResponseWriter, r *http.Request, err error) (int, any) {
	var me *methodError
	if errors.As(err, &me) {
		w.Header().Set("Allow", me.allow)
		return http.StatusMethodNotAllowed, errorBody{Error: errorJSON{Code: string(hourglass.CodeMethodNotAllowed), Message: me.Error()}}
	}
	code := hourglass.ErrorCode(err)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		code = hourglass.CodeUnavailable
	}
	status := StatusOf(code)
	msg := hourglass.ErrorMessage(err)
	var probe notReady
	switch {
	case errors.As(err, &probe):
		s.log.Debug("api: not ready", "err", err)
	case status >= 500:
		s.log.Error("api: request failed", "method", MethodLabel(r.Method), "path", r.URL.Path, "err", err)
	}
	if status >= 500 {
		if code == hourglass.CodeUnavailable {
			msg = err.Error()
		}
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="hourglass"`)
	}
	if status == http.StatusRequestTimeout {
		// The rest of the body is not read: the connection cannot carry
		// another request.
		w.Header().Set("Connection", "close")
	}
	return status, errorBody{Error: errorJSON{Code: string(code), Message: msg}}
}

// encodedJSON is a response body already encoded (a list page, built item
// by item with its bytes held in the request's budget).
type encodedJSON []byte

// encodeHeld encodes a handler's response value and holds its bytes in
// the request's budget until it is written; an encodedJSON was held as it
// was built. Errors: unavailable (no room within BodyWait), internal.
func (s *Server) encodeHeld(r *http.Request, held *hold, v any) ([]byte, error) {
	if b, ok := v.(encodedJSON); ok {
		return b, nil
	}
	b, err := encodeValue(v)
	if err != nil {
		return nil, fmt.Errorf("api: encoding the response: %w", err)
	}
	b = append(b, '\n')
	if !held.take(r.Context(), int64(cap(b)), BodyWait) {
		return nil, hourglass.Errorf(hourglass.CodeUnavailable, "too many responses in flight; retry shortly")
	}
	return b, nil
}

// marshalJSON encodes v compactly, without HTML escaping: a timer's
// payload comes back as given, not with its <, > and & rewritten as \u003c
// and so on.
func marshalJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// encodeJSON encodes an error body, which never fails.
func encodeJSON(v any) []byte {
	b, err := marshalJSON(v)
	if err != nil {
		return []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}` + "\n")
	}
	return append(b, '\n')
}

// bufferedAnswer is the largest answer writeJSON leaves net/http to count:
// net/http holds the first 2 KiB a handler writes, and when the handler
// returns with its whole answer held it sends the Content-Length itself,
// counted without a string or a header slice of the handler's. A larger
// answer (a list page) is announced here, so it is never sent chunked.
const bufferedAnswer = 1 << 10

// writeJSON writes b, a JSON value ending with a newline, with its
// Content-Type and (see bufferedAnswer) its Content-Length.
func (s *Server) writeJSON(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = s.jsonType
	if len(b) > bufferedAnswer {
		h["Content-Length"] = []string{strconv.Itoa(len(b))}
	}
	w.WriteHeader(status)
	w.Write(b)
}

func (s *Server) putProduct(r *http.Request, body []byte) (int, any, error) {
	sku := r.PathValue("sku")
	if err := hourglass.ValidateSKU(sku); err != nil {
		return 0, nil, err
	}
	p, err := decodePutProduct(sku, body)
	if err != nil {
		return 0, nil, err
	}
	out, err := s.cfg.Store.PutProduct(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, productJSON(out), nil
}

func (s *Server) getProduct(r *http.Request, _ []byte) (int, any, error) {
	sku := r.PathValue("sku")
	if err := hourglass.ValidateSKU(sku); err != nil {
		return 0, nil, err
	}
	p, err := s.cfg.Store.Product(r.Context(), sku)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, productJSON(p), nil
}

func (s *Server) createOrder(r *http.Request, body []byte) (int, any, error) {
	// The request's hash is for its idempotency key (a header present but
	// empty is refused below, after the body's own errors).
	keyed := r.Header.Values("Idempotency-Key") != nil
	p, err := decodeCreateOrder(body, keyed)
	if err != nil {
		return 0, nil, err
	}
	if keyed {
		key := r.Header.Get("Idempotency-Key")
		if key == "" || len(key) > 255 {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "Idempotency-Key header: must be 1 to 255 characters, got %d", len(key))
		}
		if err := hourglass.CheckText("Idempotency-Key header", key); err != nil {
			return 0, nil, err
		}
		p.IdempotencyKey = key
	}
	o, created, err := s.cfg.Store.CreateOrder(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	if !created {
		return http.StatusOK, orderAnswer(o.View(s.clock.Now())), nil
	}
	return http.StatusCreated, orderAnswer(o.View(s.clock.Now())), nil
}

func (s *Server) getOrder(r *http.Request, _ []byte) (int, any, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	// The store's clock decides a pay; this node's errs late against it.
	// A store that reads its clock with the row shows a pending order
	// closed from the instant a pay is refused.
	if v, ok := s.cfg.Store.(hourglass.OrderViewer); ok {
		o, err := v.ViewOrder(r.Context(), id)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, orderAnswer(o), nil
	}
	o, err := s.cfg.Store.Order(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, orderAnswer(o.View(s.clock.Now())), nil
}

// MaxListLimit is the largest page of GET /v1/orders (a page also ends at
// MaxPageBytes).
const MaxListLimit = 1000

func (s *Server) listOrders(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	f, err := parseOrderFilter(q)
	if err != nil {
		return 0, nil, err
	}
	sort := f.Sort()
	var cur orderCursor
	if sort != hourglass.OrderByID { // after is a cursor, not an id
		if cur, err = parseOrderCursor(sort, q); err != nil {
			return 0, nil, err
		}
		q = maps.Clone(q)
		delete(q, "after")
	}
	pg, err := parsePage(q, "order", 50, MaxListLimit, orderListParams...)
	if err != nil {
		return 0, nil, err
	}
	if sort == hourglass.OrderByID {
		cur.id = pg.after
	}
	f.Now = s.clock.Now()
	if v, ok := s.cfg.Store.(hourglass.OrderViewer); ok { // the clock that decides pays
		if f.Now, err = v.Now(r.Context()); err != nil {
			return 0, nil, err
		}
	}
	page := newPage(r, "orders")
	next, err := fillPage(page, pg.limit, pg.limit, cur,
		func(after orderCursor, n int) ([]hourglass.Order, error) {
			f.After, f.AfterAt, f.Limit = after.id, after.at, n
			return s.cfg.Store.ListOrders(r.Context(), f)
		},
		func(o hourglass.Order) any { return orderAnswer(o.View(f.Now)) },
		func(o hourglass.Order) orderCursor { return orderCursor{at: sort.SortKey(o), id: o.ID} })
	if err != nil {
		return 0, nil, err
	}
	var out encodedJSON
	switch {
	case next == nil:
		out, err = page.finish(nil)
	case sort == hourglass.OrderByID:
		out, err = page.finish(next.id)
	default:
		out, err = page.finish(next.String(sort))
	}
	return http.StatusOK, out, err
}

func (s *Server) payOrder(r *http.Request, body []byte) (int, any, error) {
	id, err := parseID(r.PathValue("id"))
	if err != nil {
		return 0, nil, err
	}
	var req payRequest
	if err := decodeJSON(body, &req, false); err != nil {
		return 0, nil, err
	}
	if req.PaymentID == nil {
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "payment_id: required")
	}
	o, err := s.cfg.Store.PayOrder(r.Context(), id, *req.PaymentID)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, orderAnswer(o.View(s.clock.Now())), nil
}

func (s *Server) transition(a hourglass.Action) handlerFunc {
	return func(r *http.Request, body []byte) (int, any, error) {
		id, err := parseID(r.PathValue("id"))
		if err != nil {
			return 0, nil, err
		}
		if err := decodeEmpty(body); err != nil {
			return 0, nil, err
		}
		o, err := s.cfg.Store.TransitionOrder(r.Context(), id, a)
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, orderAnswer(o.View(s.clock.Now())), nil
	}
}

func (s *Server) getPolicy(r *http.Request, _ []byte) (int, any, error) {
	p, err := s.cfg.Store.Policy(r.Context())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, policyJSON(p), nil
}

func (s *Server) putPolicy(r *http.Request, body []byte) (int, any, error) {
	p, err := decodePutPolicy(body)
	if err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.PutPolicy(r.Context(), p); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, policyJSON(p), nil
}
