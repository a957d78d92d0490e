package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/hourglass/hourglass"
)

// role is what a request's bearer token lets it do.
type role int

const (
	roleNone     role = iota // no token, or one the server does not know
	roleOperator             // one of Config.Tokens: reads and writes
	roleViewer               // one of Config.ViewerTokens: reads only
)

// tokenDigest is the SHA-256 digest of a configured token and its role.
// Digests, not tokens, are compared, so every comparison takes the same time
// whatever the lengths of the token sent and the one configured.
type tokenDigest struct {
	sum  [sha256.Size]byte
	role role
}

func digestTokens(operators, viewers []string) []tokenDigest {
	out := make([]tokenDigest, 0, len(operators)+len(viewers))
	for _, t := range operators {
		out = append(out, tokenDigest{sha256.Sum256([]byte(t)), roleOperator})
	}
	for _, t := range viewers {
		out = append(out, tokenDigest{sha256.Sum256([]byte(t)), roleViewer})
	}
	return out
}

// role returns the role of r's bearer token. The token sent is compared with
// every configured one, each in constant time, and the loop does not stop at
// a match: how long it takes tells nothing of which token matched, nor of
// its role. The scheme is case-insensitive (RFC 7235 section 2.1), so
// "bearer" and "BEARER" work too.
func (s *Server) role(r *http.Request) role {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return roleNone
	}
	sum := sha256.Sum256([]byte(got))
	var operator, viewer int
	for _, t := range s.tokens {
		eq := subtle.ConstantTimeCompare(sum[:], t.sum[:])
		operator |= eq & subtle.ConstantTimeEq(int32(t.role), int32(roleOperator))
		viewer |= eq & subtle.ConstantTimeEq(int32(t.role), int32(roleViewer))
	}
	switch {
	case operator == 1:
		return roleOperator
	case viewer == 1:
		return roleViewer
	}
	return roleNone
}

// CheckTokens returns an error naming the flag and the item to fix when the
// operators' tokens (--api-token) or the viewers' (--viewer-token) cannot be
// used: an empty item (",," or a comma at either end of the flag), an item
// with white space at either end or a control character (no client could
// send it in a header), one token in both lists (its role would be
// ambiguous), or viewer tokens without an operator's (without one the API
// asks no token, and a viewer's would limit nothing). The errors never
// quote a token. Nil lists are valid: the API asks no token.
func CheckTokens(operators, viewers []string) error {
	for _, list := range []struct {
		flag   string
		tokens []string
	}{{"--api-token", operators}, {"--viewer-token", viewers}} {
		for i, t := range list.tokens {
			switch {
			case t == "":
				return fmt.Errorf("api: %s: item %d of %d is empty (\",,\" or a comma at either end); separate tokens with single commas", list.flag, i+1, len(list.tokens))
			case strings.TrimSpace(t) != t:
				return fmt.Errorf("api: %s: item %d of %d has white space at either end, which no client can send", list.flag, i+1, len(list.tokens))
			case strings.ContainsFunc(t, unicode.IsControl):
				return fmt.Errorf("api: %s: item %d of %d has a control character, which no client can send in a header", list.flag, i+1, len(list.tokens))
			}
		}
	}
	for i, o := range operators {
		for j, v := range viewers {
			if o == v {
				return fmt.Errorf("api: item %d of --api-token is also item %d of --viewer-token: a token is an operator's or a viewer's, not both", i+1, j+1)
			}
		}
	}
	if len(viewers) > 0 && len(operators) == 0 {
		return fmt.Errorf("api: --viewer-token needs --api-token: without an API token the API asks for no token at all, and a viewer's would limit nothing")
	}
	return nil
}

// whoamiRoutes returns GET /v1/whoami: the role of the caller's token, so
// the console can leave out the actions a viewer cannot take. The server
// still refuses them; this only spares the viewer buttons that answer 403.
func (s *Server) whoamiRoutes() []route {
	return []route{{"GET", "/v1/whoami", s.getWhoami}}
}

// whoamiJSON is the body of GET /v1/whoami. Role is "operator" (reads and
// writes: an API token, or any allowed caller when no token is set) or
// "viewer" (a --viewer-token: reads only).
type whoamiJSON struct {
	Role string `json:"role"`
}

func (s *Server) getWhoami(r *http.Request, _ []byte) (int, any, error) {
	if r.URL.RawQuery != "" {
		return 0, nil, hourglass.Errorf(hourglass.CodeInvalidArgument, "GET /v1/whoami takes no query parameters")
	}
	// The middleware let the request in: without tokens it is an allowed
	// caller, who may write; with them, its token is an operator's or a
	// viewer's.
	if len(s.tokens) > 0 && s.role(r) == roleViewer {
		return http.StatusOK, whoamiJSON{Role: "viewer"}, nil
	}
	return http.StatusOK, whoamiJSON{Role: "operator"}, nil
}
