package webhook

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/hourglass/hourglass"
)

// AllowList is the set of hosts webhooks may target, so the API cannot be
// used to make the server call arbitrary (internal) addresses. An entry is
// a host name ("hooks.example.com"), a wildcard for its subdomains
// ("*.example.com", not the domain itself), or an IP address ("10.0.0.7",
// "::1"), each optionally with a port ("hooks.example.com:8443",
// "[::1]:9000"); without a port any port matches. Names match without regard
// to case or a trailing dot.
//
// Loopback, unspecified and link-local addresses (127.0.0.0/8, ::1, 0.0.0.0,
// 169.254.0.0/16 with cloud metadata endpoints, fe80::/10) are allowed only
// when listed: by IP, or, for loopback, as "localhost". This is enforced
// twice: on the URL's host when a webhook is created or delivered to, and on
// the address actually dialled, so an allowed name that resolves to
// 127.0.0.1 is refused too.
//
// The zero AllowList allows nothing. An AllowList is immutable and safe for
// concurrent use.
type AllowList struct {
	entries []allowEntry
	// ips are the listed IP literals, and localhost whether "localhost" is
	// listed: the only ways a loopback or link-local address is allowed.
	ips       map[netip.Addr]bool
	localhost bool
}

type allowEntry struct {
	host     string // lower case; for a wildcard, the suffix with its dot (".example.com")
	wildcard bool
	port     int // 0: any
}

// ParseAllowList parses comma-separated entries (see AllowList); blanks
// around entries and empty entries are ignored. It returns an error naming
// the first bad entry.
func ParseAllowList(s string) (AllowList, error) {
	var list []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	return NewAllowList(list)
}

// NewAllowList returns the allow-list of the entries (see AllowList).
func NewAllowList(entries []string) (AllowList, error) {
	a := AllowList{ips: map[netip.Addr]bool{}}
	for _, raw := range entries {
		e, err := parseEntry(strings.TrimSpace(raw))
		if err != nil {
			return AllowList{}, fmt.Errorf("webhook: allow-list entry %q: %w", raw, err)
		}
		if ip, err := netip.ParseAddr(e.host); err == nil {
			a.ips[ip.Unmap()] = true
		}
		if e.host == "localhost" {
			a.localhost = true
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

func parseEntry(s string) (allowEntry, error) {
	if s == "" {
		return allowEntry{}, fmt.Errorf("empty")
	}
	if strings.Contains(s, "/") {
		return allowEntry{}, fmt.Errorf("want a host or host:port, not a URL or a network")
	}
	host, port := s, 0
	if ip, err := netip.ParseAddr(s); err == nil { // a bare IP, IPv6 included
		return allowEntry{host: ip.Unmap().String()}, nil
	}
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return allowEntry{}, fmt.Errorf("port %q: want 1 to 65535", p)
		}
		host, port = h, n
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return allowEntry{host: ip.Unmap().String(), port: port}, nil
	}
	host = normalizeHost(host)
	wildcard := false
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		wildcard, host = true, rest
	}
	if host == "" {
		return allowEntry{}, fmt.Errorf("no host")
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || len(label) > 63 {
			return allowEntry{}, fmt.Errorf("%q is not a valid host name", host)
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return allowEntry{}, fmt.Errorf("%q is not a valid host name (a wildcard is allowed only as a leading \"*.\")", host)
			}
		}
	}
	if wildcard {
		return allowEntry{host: "." + host, wildcard: true, port: port}, nil
	}
	return allowEntry{host: host, port: port}, nil
}

func normalizeHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }

// Len returns the number of entries.
func (a AllowList) Len() int { return len(a.entries) }

// String returns the entries, comma-separated, as they would be parsed again.
func (a AllowList) String() string {
	var b strings.Builder
	for i, e := range a.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		h := e.host
		if e.wildcard {
			h = "*" + h
		}
		if e.port != 0 {
			h = net.JoinHostPort(h, strconv.Itoa(e.port))
		}
		b.WriteString(h)
	}
	return b.String()
}

// CheckURL returns nil if rawURL's host (and port) is allowed, else an
// invalid_argument *hourglass.Error naming the host. rawURL must already be
// a valid http(s) URL (hourglass.WebhookParams.Validate).
func (a AllowList) CheckURL(rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "url: %q is not a valid URL", rawURL)
	}
	host := normalizeHost(u.Hostname())
	ip, err := netip.ParseAddr(host)
	isIP := err == nil
	if isIP {
		host = ip.Unmap().String()
	}
	port := 80
	if u.Scheme == "https" {
		port = 443
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return hourglass.Errorf(hourglass.CodeInvalidArgument, "url: port %q: want 1 to 65535", p)
		}
		port = n
	}
	for _, e := range a.entries {
		if e.port != 0 && e.port != port {
			continue
		}
		if e.host == host || e.wildcard && !isIP && strings.HasSuffix(host, e.host) {
			return nil
		}
	}
	hostPort := net.JoinHostPort(host, strconv.Itoa(port))
	if len(a.entries) == 0 {
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "url: host %s is not allowed: the webhook allow-list is empty (set --webhook-allow)", hostPort)
	}
	msg := fmt.Sprintf("url: host %s is not in the webhook allow-list (--webhook-allow %s)", hostPort, a.String())
	if isIP && restricted(ip) || host == "localhost" {
		msg += "; loopback and link-local addresses are allowed only when listed"
	}
	return hourglass.Errorf(hourglass.CodeInvalidArgument, "%s", msg)
}

// restricted reports whether ip is an address reached only when listed.
func restricted(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast()
}

// allowsIP reports whether a connection to ip may be made.
func (a AllowList) allowsIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !restricted(ip) {
		return true
	}
	return a.ips[ip] || (a.localhost && ip.IsLoopback())
}

// control is a net.Dialer Control function: it refuses to connect to a
// restricted address that is not listed, whatever name resolved to it.
func (a AllowList) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dial %s: unexpected address: %w", address, err)
	}
	if !a.allowsIP(ap.Addr()) {
		return fmt.Errorf("webhook: dial %s refused: loopback and link-local addresses are allowed only when listed in --webhook-allow", address)
	}
	return nil
}
