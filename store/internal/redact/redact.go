// Package redact hides the secrets of database URLs in whatever the stores
// log or put in an error: the password of user:password@, and the value of
// every query parameter named like a secret (password, passwd, pwd,
// sslpassword, sslkey_password, secret, …: any name holding "pass", "pwd"
// or "secret", in any case), which PostgreSQL's libpq-style URLs accept.
// It imports only the standard library.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// secretName reports whether a parameter of that name holds a secret.
func secretName(name string) bool {
	n := strings.ToLower(name)
	return strings.Contains(n, "pass") || strings.Contains(n, "pwd") || strings.Contains(n, "secret")
}

// URL returns raw with its secrets replaced by Mask, for messages and logs:
// the userinfo's password and the values of secret-named query parameters.
// What does not parse as a URL with a host is cut at its last '@' and its
// query's secrets masked, never echoing what may be a password. It is safe
// for concurrent use.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || (u.Host == "" && strings.Contains(raw, "@")) {
		return unparsed(raw)
	}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), Mask)
		}
	}
	u.RawQuery = query(u.RawQuery)
	return u.String()
}

// query masks the values of secret-named parameters in a raw query, keeping
// the rest (and its order) as it was.
func query(raw string) string {
	if raw == "" {
		return raw
	}
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if hasValue && secretName(name) {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

func unparsed(raw string) string {
	rest, q, hasQuery := strings.Cut(raw, "?")
	if hasQuery {
		q = query(q)
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		scheme, userinfo, ok := strings.Cut(rest[:at], "://")
		if !ok {
			rest = Mask + "@" + rest[at+1:]
		} else {
			user, _, _ := strings.Cut(userinfo, ":")
			rest = scheme + "://" + user + ":" + Mask + "@" + rest[at+1:]
		}
	} else if !strings.Contains(rest, "://") {
		return "(unparsable URL)"
	}
	if hasQuery {
		return rest + "?" + q
	}
	return rest
}

// keyValue matches "name=value" where name is secret-like: a keyword/value
// connection string or a query quoted by a library's message.
var keyValue = regexp.MustCompile(`(?i)([a-z_]*(?:pass|pwd|secret)[a-z_]*)\s*=\s*('[^']*'|[^\s&'"]+)`)

// Scrub returns msg, a library's error text about the URL raw, with raw's
// secrets masked wherever they appear (as given or URL-escaped), the
// userinfo of any URL in msg cut, and every secret-named key=value masked.
// It is safe for concurrent use.
func Scrub(msg, raw string) string {
	for _, secret := range secrets(raw) {
		msg = strings.ReplaceAll(msg, secret, Mask)
		msg = strings.ReplaceAll(msg, url.QueryEscape(secret), Mask)
	}
	// A URL in msg may hold a password that did not decode: cut its
	// userinfo (from "://" to the "@" before the host).
	if i := strings.Index(msg, "://"); i >= 0 {
		rest := msg[i+3:]
		end := strings.IndexAny(rest, "/ ?")
		if end < 0 {
			end = len(rest)
		}
		if j := strings.LastIndex(rest[:end], "@"); j >= 0 {
			msg = msg[:i+3] + Mask + rest[j:]
		}
	}
	return keyValue.ReplaceAllString(msg, "${1}="+Mask)
}

// secrets returns the non-empty secrets raw holds.
func secrets(raw string) []string {
	var out []string
	u, err := url.Parse(raw)
	if err != nil {
		return nil
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		}
	}
	for k, vs := range u.Query() {
		if secretName(k) {
			for _, v := range vs {
				if v != "" {
					out = append(out, v)
				}
			}
		}
	}
	return out
}
