// Package redact hides the secrets of the URLs hourglass logs or puts in an
// error (databases, brokers, event sinks, webhooks, payment checks), one
// rule for all of them:
//
//   - a password (user:password@) is replaced by Mask; so is a bare user in
//     a nats:// or tls:// URL, which NATS reads as a token, and the user of
//     an http:// or https:// URL, often an API key (a database's or a
//     broker's user is kept: the server's "access denied" names it too);
//   - on http:// and https:// URLs (webhooks, payment checks), the value of
//     every query parameter: a receiver's query is its own, often a token;
//   - on other URLs, whose parameters are documented settings, the value of
//     every parameter named like a secret (SecretName: pass, pwd, secret,
//     token, auth, credential, signature, api_key, access_key, or named
//     key, sig or code);
//   - a go-sql-driver DSN (user:password@tcp(host:port)/db) keeps its user
//     and hides its password.
//
// A secret in a URL's path (a Slack-style webhook) is not recognised: put
// it in the query or a header. It imports only the standard library.
package redact

import (
	"net/url"
	"regexp"
	"strings"
)

// Mask replaces every secret.
const Mask = "xxxxx"

// secretWords are the substrings of a parameter name that make its value a
// secret; secretNames are the names that are secrets whole (word "key"
// alone would take routing_key and sslkey, a file path, too).
var (
	secretWords = []string{"pass", "pwd", "secret", "token", "auth", "credential", "signature", "apikey", "api_key", "access_key", "private_key"}
	secretNames = []string{"key", "sig", "code"}
)

// SecretName reports whether a query parameter of that name holds a secret
// (in any case, '-' read as '_'). It is safe for concurrent use.
func SecretName(name string) bool {
	n := strings.ReplaceAll(strings.ToLower(name), "-", "_")
	for _, w := range secretWords {
		if strings.Contains(n, w) {
			return true
		}
	}
	for _, w := range secretNames {
		if n == w || (w != "key" && strings.HasSuffix(n, "_"+w)) {
			return true
		}
	}
	return false
}

// URL returns raw with its secrets replaced by Mask (see the package
// comment), for messages and logs. A comma-separated list of URLs (NATS
// servers) is redacted URL by URL. What does not parse as a URL with a host
// is cut at its last '@', keeping the user, and its query's secrets masked:
// it never echoes what may be a password. It is safe for concurrent use.
func URL(raw string) string {
	if strings.Count(raw, "://") > 1 && strings.Contains(raw, ",") {
		parts := strings.Split(raw, ",")
		for i, p := range parts {
			parts[i] = URL(strings.TrimSpace(p))
		}
		return strings.Join(parts, ",")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Opaque != "" || (u.Host == "" && strings.Contains(raw, "@")) || misreadUserinfo(raw, u) {
		return unparsed(raw)
	}
	if u.User != nil {
		_, hasPassword := u.User.Password()
		switch {
		case allSecret(u.Scheme) && hasPassword:
			// An HTTP API's basic-auth user is often a key itself.
			u.User = url.UserPassword(Mask, Mask)
		case hasPassword:
			u.User = url.UserPassword(u.User.Username(), Mask)
		case allSecret(u.Scheme) || u.Scheme == "nats" || u.Scheme == "tls":
			u.User = url.User(Mask) // a bare user in a NATS URL is a token
		}
	}
	u.RawQuery = query(u.RawQuery, allSecret(u.Scheme))
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// misreadUserinfo reports whether url.Parse took a user:password@ for
// something else: a '?', '#' or '/' in a numeric password
// ("postgres://u:1234?x@h/db" parses as host u, port 1234).
func misreadUserinfo(raw string, u *url.URL) bool {
	if u.User != nil {
		return false
	}
	_, body, _ := strings.Cut(raw, "://")
	userinfo, _, ok := splitUserinfo(body)
	return ok && strings.Contains(userinfo, ":")
}

// allSecret reports whether every query value of a URL of that scheme is
// taken as a secret.
func allSecret(scheme string) bool {
	s := strings.ToLower(scheme)
	return s == "http" || s == "https"
}

// query masks the values of secret parameters in a raw query (all of them
// when all), keeping the rest (and its order) as it was.
func query(raw string, all bool) string {
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
		if hasValue && (all || SecretName(name)) {
			parts[i] = k + "=" + Mask
		}
	}
	return strings.Join(parts, "&")
}

// queryValues returns the secret values of a raw query (every value when
// all), as written and unescaped, at least 4 bytes long: shorter ones (on,
// 1, true) would mask words of a message.
func queryValues(raw string, all bool) []string {
	var out []string
	for _, p := range strings.Split(raw, "&") {
		k, v, ok := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err == nil {
			k = name
		}
		if !ok || !(all || SecretName(k)) {
			continue
		}
		if len(v) >= 4 {
			out = append(out, v)
		}
		if plain, err := url.QueryUnescape(v); err == nil && plain != v && len(plain) >= 4 {
			out = append(out, plain)
		}
	}
	return out
}

// unparsed redacts what url.Parse refused or what has no host: a
// go-sql-driver DSN (user:pass@tcp(host:3306)/db?…), a URL with a bad
// escape, a '?', '#' or '/' in its password. The userinfo ends at the '@'
// of a DSN's address, else at the last '@' of the whole string: a
// password may hold any character, so what follows its first '?' cannot
// be trusted to be a query.
func unparsed(raw string) string {
	scheme, body, hasScheme := strings.Cut(raw, "://")
	prefix := scheme + "://"
	if !hasScheme {
		scheme, body, prefix = "", raw, ""
	}
	all := hasScheme && allSecret(scheme)
	userinfo, after, hasUser := splitUserinfo(body)
	if !hasUser {
		if !hasScheme {
			return "(unparsable URL)"
		}
		after = body
	}
	if rest, q, hasQuery := strings.Cut(after, "?"); hasQuery {
		after = rest + "?" + query(q, all)
	}
	if !hasUser {
		return prefix + after
	}
	user, _, hasPassword := strings.Cut(userinfo, ":")
	switch {
	case all:
		user = Mask
		if hasPassword {
			user += ":" + Mask
		}
	case hasPassword:
		user += ":" + Mask
	case (!hasScheme && !isDSNAddress(after)) || scheme == "nats" || scheme == "tls":
		user = Mask // without a scheme, a lone part before '@' may be a password
	}
	return prefix + user + "@" + after
}

// splitUserinfo splits what follows a URL's "://" (or a whole DSN) at the
// '@' that ends its userinfo: the one before a DSN address (tcp(…),
// unix(…), (…)), else the last.
func splitUserinfo(body string) (userinfo, after string, ok bool) {
	at := -1
	for _, addr := range []string{"@tcp(", "@tcp6(", "@unix(", "@("} {
		at = max(at, strings.LastIndex(body, addr))
	}
	if at < 0 {
		at = strings.LastIndex(body, "@")
	}
	if at < 0 {
		return "", body, false
	}
	return body[:at], body[at+1:], true
}

// isDSNAddress reports whether s, what follows a DSN's '@', is a
// go-sql-driver address: tcp(host:port), unix(/path) or (host:port).
func isDSNAddress(s string) bool {
	proto, _, ok := strings.Cut(s, "(")
	return ok && (proto == "" || proto == "tcp" || proto == "tcp6" || proto == "unix")
}

// IsDSN reports whether raw looks like a go-sql-driver DSN
// (user:password@tcp(host:3306)/db) rather than a URL. It is safe for
// concurrent use.
func IsDSN(raw string) bool {
	rest, _, _ := strings.Cut(raw, "?")
	if strings.Contains(rest, "://") {
		return false
	}
	at := strings.LastIndex(rest, "@")
	return isDSNAddress(rest[at+1:])
}

// keyValue matches "name=value" where name is secret-like: a keyword/value
// connection string or a query quoted by a library's message.
var keyValue = regexp.MustCompile(`(?i)([a-z_]*(?:pass|pwd|secret|token|signature|api_?key|access_key)[a-z_]*)\s*=\s*('[^']*'|[^\s&'"]+)`)

// anyURL matches a URL inside a message: a scheme, "://" and what follows
// up to a space, a quote or a bracket.
var anyURL = regexp.MustCompile(`[a-zA-Z][a-zA-Z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// Scrub returns msg, a library's error text about the URLs raws (any may be
// ""), with their secrets masked wherever they appear (as given or
// URL-escaped), every URL in msg redacted as URL does, and every
// secret-named key=value masked. It is safe for concurrent use.
func Scrub(msg string, raws ...string) string {
	for _, raw := range raws {
		for _, secret := range secrets(raw) {
			msg = strings.ReplaceAll(msg, secret, Mask)
			msg = strings.ReplaceAll(msg, url.QueryEscape(secret), Mask)
		}
	}
	msg = anyURL.ReplaceAllStringFunc(msg, URL)
	// A URL in msg may hold a password that did not decode or that holds
	// a space: cut its userinfo (from "://" to the "@" before the host).
	if i := strings.Index(msg, "://"); i >= 0 {
		rest := msg[i+3:]
		end := strings.IndexAny(rest, "/ ?")
		if end < 0 {
			end = len(rest)
		}
		if j := strings.LastIndex(rest[:end], "@"); j >= 0 && !strings.HasPrefix(rest, Mask+"@") && !strings.Contains(rest[:j], ":"+Mask) {
			msg = msg[:i+3] + Mask + rest[j:]
		}
	}
	return keyValue.ReplaceAllString(msg, "${1}="+Mask)
}

// Err returns err with the secrets of raws (and of every URL its text
// holds, such as the one net/http's *url.Error quotes in full) masked in
// its message, as Scrub does; errors.Is and errors.As still see err. It
// returns nil for a nil err. It is safe for concurrent use.
func Err(err error, raws ...string) error {
	if err == nil {
		return nil
	}
	return &scrubbed{err: err, msg: Scrub(err.Error(), raws...)}
}

type scrubbed struct {
	err error
	msg string
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// secrets returns the non-empty secrets raw holds.
func secrets(raw string) []string {
	if raw == "" {
		return nil
	}
	var out []string
	u, err := url.Parse(raw)
	if err != nil || misreadUserinfo(raw, u) {
		// Unparsable: the password is between the first ':' of the
		// userinfo and the '@' that ends it (splitUserinfo).
		body := raw
		if _, after, ok := strings.Cut(raw, "://"); ok {
			body = after
		}
		scheme, _, _ := strings.Cut(raw, "://")
		userinfo, after, ok := splitUserinfo(body)
		if ok {
			if _, pw, ok := strings.Cut(userinfo, ":"); ok && pw != "" {
				out = append(out, pw)
			}
		}
		if _, q, ok := strings.Cut(after, "?"); ok {
			out = append(out, queryValues(q, allSecret(scheme))...)
		}
		return out
	}
	if u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			out = append(out, pw)
		} else if (u.Scheme == "nats" || u.Scheme == "tls") && u.User.Username() != "" {
			out = append(out, u.User.Username())
		}
	}
	all := allSecret(u.Scheme)
	for k, vs := range u.Query() {
		if all || SecretName(k) {
			for _, v := range vs {
				if len(v) >= 4 { // shorter values (on, 1, true) would mask words of the message
					out = append(out, v)
				}
			}
		}
	}
	return out
}
