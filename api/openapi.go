package api

import (
	_ "embed"
	"net/http"
)

// OpenAPIPath is where the server serves its OpenAPI document. Like
// /metrics it is public: it describes the API and holds no data.
const OpenAPIPath = "/v1/openapi.json"

// openAPIDocument is the OpenAPI 3.1 description of every route Routes
// lists and of the webhook deliveries (its "webhooks"). TestOpenAPI sends
// requests to every route and validates them and their answers against it.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPI returns the OpenAPI 3.1 document the server serves at
// OpenAPIPath. The caller must not modify it.
func OpenAPI() []byte { return openAPIDocument }

// Route is one method and path pattern the server answers, as registered
// on its mux (a path parameter is written {name}).
type Route struct {
	Method, Path string
}

// Routes returns the routes of the API and the probes this server answers
// (the optional ones only when configured), in registration order. The
// dashboard's page and its static files are not in it: they are a web page,
// not the API. It is safe for concurrent use.
func (s *Server) Routes() []Route {
	out := make([]Route, len(s.registered))
	copy(out, s.registered)
	return out
}

func (s *Server) getOpenAPI(*http.Request, []byte) (int, any, error) {
	return http.StatusOK, encodedJSON(openAPIDocument), nil
}
