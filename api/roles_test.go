package api_test

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/api"
)

// The full server's other tokens (startFullServer): an API token being
// rotated out, beside openAPIToken, and a viewer's.
const (
	openAPIOldToken    = "openapi-old-secret"
	openAPIViewerToken = "openapi-viewer-secret"
)

// pathParam is a parameter in a documented path ("{id}").
var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// rolesCall sends method path with the bearer token (none for "") and
// returns the status and the body, validating the response against the
// document: a 403 on a route that does not document one fails the test.
func rolesCall(t *testing.T, s *fullServer, c *openAPICheck, method, path, token string) (int, []byte) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader(`{}`)
	}
	hr, err := http.NewRequestWithContext(t.Context(), method, s.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if method == http.MethodHead {
		return resp.StatusCode, got
	}
	route, params, err := c.router.FindRoute(hr)
	if err != nil {
		return resp.StatusCode, got // no operation: an unknown path
	}
	in := &openapi3filter.RequestValidationInput{Request: hr, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}}
	out.SetBodyBytes(got)
	if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
		t.Errorf("%s %s: the %d response breaks the document: %v\nbody: %.500s", method, path, resp.StatusCode, err, got)
	}
	return resp.StatusCode, got
}

// errorCode returns the code of an API error body.
func errorCode(t *testing.T, body []byte) (code, message string) {
	t.Helper()
	var e struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	return e.Error.Code, e.Error.Message
}

// TestViewerToken walks every operation of the OpenAPI document with the
// viewer token: every write (any method but GET and HEAD) is answered 403
// forbidden with a message naming the viewer, and changes nothing; every
// read is answered 2xx or a 4xx that is not 401 or 403. New routes are
// walked as they are documented (TestOpenAPI holds the document to the
// server's routes).
func TestViewerToken(t *testing.T) {
	t.Parallel()
	s := startFullServer(t)
	_, router := loadOpenAPI(t, api.OpenAPI())
	c := &openAPICheck{t: t, base: s.URL, router: router, answered: map[string]bool{}}
	// Things for the reads to find and the writes to leave alone.
	c.do(req{method: "PUT", path: "/v1/products/sku-1", body: `{"name":"Mug","category":"home","available":100}`, want: 200})
	c.do(req{method: "POST", path: "/v1/orders", body: `{"user_id":"u1","items":[{"sku":"sku-1","quantity":1}],"timeout_ms":600000}`, want: 201})
	c.do(req{method: "PUT", path: "/v1/timers/t1", body: `{"delay_ms":600000}`, want: 201})
	values := map[string]string{"{sku}": "sku-1", "{id}": "1", "{key}": "t1", "{name}": "shop_orders"}

	doc, _ := loadOpenAPI(t, api.OpenAPI())
	var writes, reads int
	for _, path := range doc.Paths.InMatchingOrder() {
		if !strings.HasPrefix(path, "/v1/") || path == api.OpenAPIPath {
			continue // public: no token asked
		}
		concrete := pathParam.ReplaceAllStringFunc(path, func(p string) string {
			if v, ok := values[p]; ok {
				return v
			}
			return "1"
		})
		for method, op := range doc.Paths.Value(path).Operations() {
			status, body := rolesCall(t, s, c, method, concrete, openAPIViewerToken)
			if method == http.MethodGet || method == http.MethodHead {
				reads++
				if status == http.StatusUnauthorized || status == http.StatusForbidden || status >= 500 || status < 200 {
					t.Errorf("viewer %s %s: %d %s; want 2xx or a 4xx but 401 and 403", method, path, status, body)
				}
				continue
			}
			writes++
			if r := op.Responses.Status(http.StatusForbidden); r == nil || r.Value == nil || r.Value.Description == nil || !strings.Contains(*r.Value.Description, "viewer") {
				t.Errorf("%s %s: the document's 403 does not say a viewer's token is refused", method, path)
			}
			if status != http.StatusForbidden {
				t.Errorf("viewer %s %s: %d %s; want 403", method, path, status, body)
				continue
			}
			if code, msg := errorCode(t, body); code != string(hourglass.CodeForbidden) || !strings.Contains(msg, "viewer") {
				t.Errorf("viewer %s %s: %s %q; want forbidden, a message naming the viewer", method, path, code, msg)
			}
		}
	}
	var wantWrites, wantReads int
	for _, rt := range s.Server.Routes() {
		switch {
		case !strings.HasPrefix(rt.Path, "/v1/") || rt.Path == api.OpenAPIPath:
		case rt.Method == http.MethodGet:
			wantReads++
		default:
			wantWrites++
		}
	}
	if writes != wantWrites || reads != wantReads || writes == 0 {
		t.Errorf("walked %d writes and %d reads; the server has %d and %d", writes, reads, wantWrites, wantReads)
	}

	// Nothing was written: the order is still pending, the timer still
	// scheduled, the product as it was.
	var o api.OrderJSON
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/orders/1", want: 200}), &o)
	var tm api.TimerJSON
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/timers/t1", want: 200}), &tm)
	var p struct{ Available int64 }
	json.Unmarshal(c.do(req{method: "GET", path: "/v1/products/sku-1", want: 200}), &p)
	if o.Status != string(hourglass.StatePendingPayment) || tm.Status != "scheduled" || p.Available != 99 {
		t.Errorf("after the viewer's writes: order %s, timer %s, product available %d; want pending_payment, scheduled, 99", o.Status, tm.Status, p.Available)
	}

	// Beyond the document: HEAD reads; any other method, on any /v1 path,
	// is a write; the public routes and the dashboard's page need nothing.
	for _, tt := range []struct {
		method, path string
		want         int
	}{
		{"HEAD", "/v1/orders/1", 200},
		{"GET", "/v1/nowhere", 404},
		{"POST", "/v1/nowhere", 403},
		{"PATCH", "/v1/orders/1", 403},
		{"OPTIONS", "/v1/orders", 403},
		{"GET", "/", 200},
		{"GET", "/healthz", 200},
	} {
		if status, body := rolesCall(t, s, c, tt.method, tt.path, openAPIViewerToken); status != tt.want {
			t.Errorf("viewer %s %s: %d %s; want %d", tt.method, tt.path, status, body, tt.want)
		}
	}
	// GET /v1/whoami tells each token's role, so the console shows a
	// viewer no action.
	for tok, want := range map[string]string{openAPIViewerToken: "viewer", openAPIOldToken: "operator"} {
		status, body := rolesCall(t, s, c, "GET", "/v1/whoami", tok)
		var who struct{ Role string }
		if err := json.Unmarshal(body, &who); status != http.StatusOK || err != nil || who.Role != want {
			t.Errorf("GET /v1/whoami with the %s's token: %d %s; want 200 role %q", want, status, body, want)
		}
	}
	// An API token still writes.
	if status, body := rolesCall(t, s, c, "POST", "/v1/orders/1/cancel", openAPIOldToken); status != http.StatusOK {
		t.Errorf("operator's cancel: %d %s", status, body)
	}
}

// TestTokenRotation: every listed API token reads and writes, so clients can
// move from the old token to the new one while both are listed; any other
// token is a 401, and so is the viewer's token with anything added.
func TestTokenRotation(t *testing.T) {
	t.Parallel()
	s := startFullServer(t)
	_, router := loadOpenAPI(t, api.OpenAPI())
	c := &openAPICheck{t: t, base: s.URL, router: router, answered: map[string]bool{}}
	for i, token := range []string{openAPIToken, openAPIOldToken} {
		if status, body := rolesCall(t, s, c, "GET", "/v1/orders", token); status != http.StatusOK {
			t.Errorf("token %d: GET /v1/orders: %d %s", i+1, status, body)
		}
		if status, body := rolesCall(t, s, c, "PUT", "/v1/policies", token); status != http.StatusBadRequest {
			t.Errorf("token %d: PUT /v1/policies {}: %d %s; want 400 (the write was let through)", i+1, status, body)
		}
	}
	for _, token := range []string{"", "a-third-token", openAPIToken + "x", openAPIViewerToken[:len(openAPIViewerToken)-1],
		openAPIToken + "," + openAPIOldToken, " " + openAPIToken} {
		for _, method := range []string{"GET", "POST"} {
			status, body := rolesCall(t, s, c, method, "/v1/orders", token)
			if code, _ := errorCode(t, body); status != http.StatusUnauthorized || code != string(hourglass.CodeUnauthorized) {
				t.Errorf("token %q: %s /v1/orders: %d %s; want 401 unauthorized", token, method, status, body)
			}
		}
	}
}

// TestCheckTokens: the token lists a server refuses at start, each with an
// error that names the flag and the item, never the token.
func TestCheckTokens(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name              string
		operators, viewer []string
		want              string // in the error; "" for none
	}{
		{"none", nil, nil, ""},
		{"one", []string{"a"}, nil, ""},
		{"rotation", []string{"new", "old"}, []string{"v1", "v2"}, ""},
		{"the same token twice in one list", []string{"a", "a"}, nil, ""},
		{"empty", []string{""}, nil, "--api-token: item 1 of 1 is empty"},
		{"empty between", []string{"a", "", "b"}, nil, "--api-token: item 2 of 3 is empty"},
		{"empty viewer", []string{"a"}, []string{"v", ""}, "--viewer-token: item 2 of 2 is empty"},
		{"space", []string{"a "}, nil, "--api-token: item 1 of 1 has white space"},
		{"control", []string{"a\nb"}, nil, "--api-token: item 1 of 1 has a control character"},
		{"both", []string{"a", "shared-secret"}, []string{"v", "w", "shared-secret"}, "item 2 of --api-token is also item 3 of --viewer-token"},
		{"viewer alone", nil, []string{"v"}, "--viewer-token needs --api-token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := api.CheckTokens(tt.operators, tt.viewer)
			_, serr := api.NewServer(api.Config{Store: struct{ hourglass.Store }{}, Engine: readyScheduler{},
				Tokens: tt.operators, ViewerTokens: tt.viewer, Logger: slog.New(slog.DiscardHandler)})
			for _, e := range []error{err, serr} {
				switch {
				case tt.want == "" && e != nil:
					t.Errorf("error %v; want none", e)
				case tt.want != "" && (e == nil || !strings.Contains(e.Error(), tt.want)):
					t.Errorf("error %v; want one with %q", e, tt.want)
				case e != nil && slices.ContainsFunc(append(tt.operators, tt.viewer...), func(tok string) bool {
					return len(tok) > 1 && strings.Contains(e.Error(), tok)
				}):
					t.Errorf("error %q quotes a token", e)
				}
			}
		})
	}
}
