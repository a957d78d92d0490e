// Package myurl turns hourglass's mysql:// URLs into go-sql-driver
// configurations. It is shared by store/mysql and its test helper mytest,
// so both read a URL the same way.
package myurl

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/hourglass/hourglass/internal/redact"
)

// TLS modes accepted in the tls URL parameter, as go-sql-driver names them.
var tlsModes = []string{"true", "false", "skip-verify", "preferred"}

// Parse reads mysql://user:pass@host:port/db?tls=…&timeout=… into a driver
// configuration with no session settings yet. The port defaults to 3306 and
// the database name is required. Errors are one line that never contains
// the password.
func Parse(raw string) (*gomysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// url's errors quote the whole URL, password included: say what is
		// wrong without it.
		return nil, fmt.Errorf("URL %s is malformed: want mysql://user:password@host:3306/database", Redact(raw))
	}
	if u.Scheme != "mysql" {
		return nil, fmt.Errorf("URL %s: scheme must be mysql://, got %q", Redact(raw), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %s has no host: want mysql://user:password@host:3306/database", Redact(raw))
	}
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" || strings.Contains(db, "/") {
		return nil, fmt.Errorf("URL %s: the path must be the database name, as in mysql://user@host:3306/hourglass", Redact(raw))
	}
	cfg := gomysql.NewConfig()
	cfg.Net = "tcp"
	cfg.Addr = u.Host
	if u.Port() == "" {
		cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
	}
	cfg.DBName = db
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.Timeout = 5 * time.Second
	for k, vs := range u.Query() {
		v := vs[len(vs)-1]
		switch k {
		case "tls":
			ok := false
			for _, m := range tlsModes {
				ok = ok || v == m
			}
			if !ok {
				return nil, fmt.Errorf("URL %s: tls=%q: want one of %s", Redact(raw), v, strings.Join(tlsModes, ", "))
			}
			cfg.TLSConfig = v
		case "timeout":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return nil, fmt.Errorf("URL %s: timeout=%q: want a positive duration such as 5s", Redact(raw), v)
			}
			cfg.Timeout = d
		default:
			return nil, fmt.Errorf("URL %s: parameter %q is not supported (supported: tls, timeout)", Redact(raw), k)
		}
	}
	return cfg, nil
}

// Redact returns raw with its password, and the value of any parameter
// named like one, replaced by "xxxxx", for messages. What does not parse as
// a URL with a host is cut at its last '@', or hidden whole, never echoing
// what may be a password (see internal/redact).
func Redact(raw string) string { return redact.URL(raw) }

// WithDatabase returns raw with its path replaced by db.
func WithDatabase(raw, db string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("URL %s is malformed", Redact(raw))
	}
	u.Path = "/" + db
	return u.String(), nil
}
