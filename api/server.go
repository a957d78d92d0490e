// Package api is hourglass's HTTP API (v1, JSON) and its Go client.
package api

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hourglass/hourglass"
)

// Scheduler is what the API needs of the timing engine.
type Scheduler interface {
	// Schedule is told of every committed pending order.
	Schedule(t hourglass.Timer)
	// Cancel is told of every order that stopped being pending.
	Cancel(orderID int64)
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

// Config configures a Server. Store and Scheduler are required.
type Config struct {
	Store     hourglass.Store
	Scheduler Scheduler
	Clock     hourglass.Clock
	Logger    *slog.Logger
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every /v1 route.
	Token    string
	Observer Observer
	// Metrics serves GET /metrics when set.
	Metrics http.Handler
	// Webhooks serves /v1/webhooks and /v1/deadletters when set (webhooks.go).
	Webhooks WebhookService
	// Dashboard serves the dashboard at / when set (dashboard.go).
	Dashboard DashboardSource
	// Cluster serves GET /v1/cluster when set (cluster.go).
	Cluster ClusterSource
	// Timers serves /v1/timers when set (timers.go); armed timers are
	// told to Scheduler like created orders.
	Timers hourglass.TimerStore
	// MaxBodyMemory bounds the bytes of request bodies held at once
	// (default MaxBodyMemoryDefault). A request reserves its body's size
	// (its Content-Length, or MaxBodyBytes when unknown) before reading it;
	// when the budget stays exhausted for BodyWait, it is answered 503
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
}

// NewServer returns a server; Handler returns its http.Handler.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Scheduler == nil {
		return nil, errors.New("api: Store and Scheduler are required")
	}
	if cfg.MaxBodyMemory < 0 {
		return nil, errors.New("api: MaxBodyMemory must not be negative")
	}
	s := &Server{cfg: cfg, clock: cfg.Clock, log: cfg.Logger, mux: http.NewServeMux(),
		bodies: newByteBudget(cmp.Or(cfg.MaxBodyMemory, MaxBodyMemoryDefault))}
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
// route under /v1 requires the token when one is configured.
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
	allowed := map[string][]string{}
	for _, rt := range routes {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt.path, true, rt.h))
		allowed[rt.path] = append(allowed[rt.path], rt.method)
	}
	for path, methods := range allowed {
		allow := strings.Join(methods, ", ")
		s.mux.Handle(path, s.wrap(path, true, func(r *http.Request, _ []byte) (int, any, error) {
			return 0, nil, &methodError{allow: allow, method: r.Method}
		}))
	}
	probes := []string{"/healthz", "/readyz"}
	if s.cfg.Metrics != nil {
		probes = append(probes, "/metrics")
	}
	for _, p := range probes {
		s.mux.Handle(p, s.wrap(p, false, func(r *http.Request, _ []byte) (int, any, error) {
			return 0, nil, &methodError{allow: "GET", method: r.Method}
		}))
	}
	s.mux.Handle("GET /healthz", s.wrap("/healthz", false, func(*http.Request, []byte) (int, any, error) {
		return http.StatusOK, map[string]string{"status": "ok"}, nil
	}))
	s.mux.Handle("GET /readyz", s.wrap("/readyz", false, func(*http.Request, []byte) (int, any, error) {
		if !s.cfg.Scheduler.Ready() {
			return 0, nil, notReady{hourglass.Errorf(hourglass.CodeUnavailable, "recovery has not finished")}
		}
		if err := s.cfg.Scheduler.Healthy(); err != nil {
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
func (s *Server) Handler() http.Handler { return s.mux }

// wrap adds authentication, the body limit, error rendering and metrics.
func (s *Server) wrap(route string, auth bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.clock.Now()
		status, v, err := s.serve(r, auth, h)
		if err != nil {
			status, v = s.renderError(w, r, err)
		}
		writeJSON(w, status, v)
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

func (s *Server) serve(r *http.Request, auth bool, h handlerFunc) (status int, v any, err error) {
	defer func() {
		// A panic in a handler is a bug; answer 500 rather than drop the
		// connection, and log it with the stack's first line.
		if p := recover(); p != nil {
			s.log.Error("api: panic in handler", "method", r.Method, "path", r.URL.Path, "panic", p)
			status, v, err = 0, nil, errors.New("panic")
		}
	}()
	if auth && s.cfg.Token != "" && !s.authorized(r) {
		return 0, nil, hourglass.Errorf(hourglass.CodeUnauthorized, "missing or wrong bearer token in the Authorization header")
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody && r.Method != http.MethodGet {
		if r.ContentLength > MaxBodyBytes {
			return 0, nil, hourglass.Errorf(hourglass.CodePayloadTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
		}
		// Reserve the body's size before reading it; of unknown size, the
		// most it may be.
		size := r.ContentLength
		if size < 0 {
			size = MaxBodyBytes
		}
		if !s.bodies.acquire(r.Context(), size, BodyWait) {
			return 0, nil, hourglass.Errorf(hourglass.CodeUnavailable, "too many request bodies in flight; retry shortly")
		}
		defer s.bodies.release(size)
		if r.ContentLength >= 0 {
			// The server's body reader ends at Content-Length: read into a
			// buffer of exactly that size.
			body = make([]byte, r.ContentLength)
			_, err = io.ReadFull(r.Body, body)
		} else {
			body, err = io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
		}
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return 0, nil, hourglass.Errorf(hourglass.CodePayloadTooLarge, "request body exceeds %d bytes", MaxBodyBytes)
		}
		if err != nil {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "reading request body: %s", err)
		}
	}
	return h(r, body)
}

// authorized checks the bearer token in constant time. The scheme is
// case-insensitive (RFC 7235 section 2.1), so "bearer" and "BEARER" work too.
func (s *Server) authorized(r *http.Request) bool {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	return ok && strings.EqualFold(scheme, "Bearer") && subtle.ConstantTimeCompare([]byte(got), []byte(s.cfg.Token)) == 1
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
	return status, errorBody{Error: errorJSON{Code: string(code), Message: msg}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	// Without HTML escaping: a timer's payload comes back as given, not
	// with its <, > and & rewritten as \u003c and so on.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	b := buf.Bytes()
	if err := enc.Encode(v); err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the response failed"}}` + "\n")
	} else {
		b = buf.Bytes() // Encode ends it with a newline
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
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
	p, err := DecodeCreateOrder(body)
	if err != nil {
		return 0, nil, err
	}
	if key := r.Header.Get("Idempotency-Key"); key != "" || r.Header.Values("Idempotency-Key") != nil {
		if key == "" || len(key) > 255 {
			return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "Idempotency-Key header: must be 1 to 255 characters, got %d", len(key))
		}
		p.IdempotencyKey = key
	}
	o, created, err := s.cfg.Store.CreateOrder(r.Context(), p)
	if err != nil {
		return 0, nil, err
	}
	if !created {
		return http.StatusOK, orderJSON(o.View(s.clock.Now())), nil
	}
	s.cfg.Scheduler.Schedule(hourglass.Timer{OrderID: o.ID, Deadline: o.Deadline})
	return http.StatusCreated, orderJSON(o.View(s.clock.Now())), nil
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
		return http.StatusOK, orderJSON(o), nil
	}
	o, err := s.cfg.Store.Order(r.Context(), id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, orderJSON(o.View(s.clock.Now())), nil
}

// MaxListLimit is the largest page of GET /v1/orders.
const MaxListLimit = 1000

func (s *Server) listOrders(r *http.Request, _ []byte) (int, any, error) {
	q := r.URL.Query()
	pg, err := parsePage(q, "order", 50, MaxListLimit, "status")
	if err != nil {
		return 0, nil, err
	}
	f := hourglass.OrderFilter{Limit: pg.limit + 1, After: pg.after, Now: s.clock.Now()} // one more, to know whether there is a next page
	if v := q.Get("status"); v != "" {
		st, err := hourglass.ParseState(v)
		if err != nil {
			return 0, nil, err
		}
		f.Status = st
	}
	orders, err := s.cfg.Store.ListOrders(r.Context(), f)
	if err != nil {
		return 0, nil, err
	}
	orders, next := trimPage(orders, pg.limit, func(o hourglass.Order) int64 { return o.ID })
	out := OrderListJSON{Orders: make([]OrderJSON, 0, len(orders)), Next: next}
	for _, o := range orders {
		out.Orders = append(out.Orders, orderJSON(o.View(f.Now)))
	}
	return http.StatusOK, out, nil
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
	s.cfg.Scheduler.Cancel(id)
	return http.StatusOK, orderJSON(o.View(s.clock.Now())), nil
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
		if a == hourglass.ActionCancel {
			s.cfg.Scheduler.Cancel(id)
		}
		return http.StatusOK, orderJSON(o.View(s.clock.Now())), nil
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
