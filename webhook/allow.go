package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hourglass/hourglass"
	"github.com/hourglass/hourglass/internal/redact"
)

// AllowList is the set of hosts webhooks may target, so the API cannot be
// used to make the server call arbitrary (internal) addresses. An entry is
// a host name ("hooks.example.com"), a wildcard for its subdomains
// ("*.example.com", not the domain itself), or an IP address ("10.0.0.7",
// "::1"), each optionally with a port ("hooks.example.com:8443",
// "[::1]:9000"); without a port any port matches. Names match without regard
// to case or a trailing dot.
//
// Loopback, unspecified, link-local and multicast addresses (127.0.0.0/8,
// ::1, 0.0.0.0, 169.254.0.0/16 with cloud metadata endpoints, fe80::/10) are
// allowed only when listed with the port dialled: by IP, or, for loopback, as
// "localhost". Private addresses (10/8, 172.16/12, 192.168/16, CGNAT
// 100.64/10, IPv6 unique-local fc00::/7) are allowed for an exact name or IP
// listed, but not for a name matched only by a wildcard, unless the dialer
// is told to allow them (Config.AllowPrivate). This is enforced twice: on the
// URL's host when a webhook is created or delivered to, and on the addresses
// the host resolves to, which the dialer resolves itself and filters before
// dialling one of them (see dialer), so an allowed name that resolves to
// 127.0.0.1 is refused too.
//
// The zero AllowList allows nothing. An AllowList is immutable and safe for
// concurrent use.
type AllowList struct {
	entries []allowEntry
	// ips are the listed IP literals with their ports (0: any), and
	// localhost the ports "localhost" is listed with: the only ways a
	// restricted address is allowed.
	ips       map[netip.Addr][]int
	localhost []int
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
	a := AllowList{ips: map[netip.Addr][]int{}}
	for _, raw := range entries {
		e, err := parseEntry(strings.TrimSpace(raw))
		if err != nil {
			return AllowList{}, fmt.Errorf("webhook: allow-list entry %q: %w", raw, err)
		}
		if ip, err := netip.ParseAddr(e.host); err == nil {
			a.ips[ip.Unmap()] = append(a.ips[ip.Unmap()], e.port)
		}
		if e.host == "localhost" {
			a.localhost = append(a.localhost, e.port)
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
		return hourglass.Errorf(hourglass.CodeInvalidArgument, "url: %q is not a valid URL", redact.URL(rawURL))
	}
	host, ip, isIP := canonicalHost(u.Hostname())
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
	if _, ok := a.match(host, isIP, port); ok {
		return nil
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

// canonicalHost normalises a URL's or dial address's host once: lower case,
// no trailing dot, an IP literal in its canonical form ("127.0.0.1." is the
// IP 127.0.0.1, not a name to resolve). isIP reports whether it is one.
func canonicalHost(h string) (host string, ip netip.Addr, isIP bool) {
	host = normalizeHost(h)
	if ip, err := netip.ParseAddr(host); err == nil && ip.Zone() == "" {
		ip = ip.Unmap()
		return ip.String(), ip, true
	}
	return host, netip.Addr{}, false
}

// match returns the entry that allows host (canonical) at port: an exact
// entry before a wildcard one.
func (a AllowList) match(host string, isIP bool, port int) (allowEntry, bool) {
	var found allowEntry
	ok := false
	for _, e := range a.entries {
		if e.port != 0 && e.port != port {
			continue
		}
		if e.host == host && !e.wildcard {
			return e, true
		}
		if e.wildcard && !isIP && strings.HasSuffix(host, e.host) && !ok {
			found, ok = e, true
		}
	}
	return found, ok
}

// restricted reports whether ip is an address reached only when listed.
func restricted(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsMulticast() || ip.IsInterfaceLocalMulticast()
}

// cgnat is the shared address space of carrier-grade NAT (RFC 6598), which
// netip's IsPrivate leaves out.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// private reports whether ip is an internal address: RFC 1918, CGNAT or IPv6
// unique-local.
func private(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsPrivate() || cgnat.Contains(ip)
}

// listed reports whether ip is listed by IP (or, for loopback, as
// "localhost") with port or with any port.
func (a AllowList) listed(ip netip.Addr, port int) bool {
	ports := a.ips[ip]
	if ip.IsLoopback() {
		ports = append(ports[:len(ports):len(ports)], a.localhost...)
	}
	for _, p := range ports {
		if p == 0 || p == port {
			return true
		}
	}
	return false
}

// allowsIP reports whether a connection to ip:port may be made for a host
// matched by entry e; allowPrivate lets a wildcard match reach private
// addresses.
func (a AllowList) allowsIP(e allowEntry, ip netip.Addr, port int, allowPrivate bool) error {
	ip = ip.Unmap()
	switch {
	case a.listed(ip, port):
		return nil
	case restricted(ip):
		return fmt.Errorf("%s is a loopback, link-local, unspecified or multicast address, allowed only when listed with its port in --webhook-allow", netip.AddrPortFrom(ip, uint16(port)))
	case private(ip) && e.wildcard && !allowPrivate:
		return fmt.Errorf("%s is a private address and the host matched only the wildcard *%s (list the host or address itself, or set --webhook-allow-private)", ip, e.host)
	}
	return nil
}

// dialer connects to webhook receivers. It resolves the host itself, keeps
// only the addresses the allow-list permits for the entry that matched the
// host and port (AllowList.allowsIP), and dials one of those by IP: what is
// dialled is what was checked, and an IP literal, trailing dot or not, is
// never looked up. It is safe for concurrent use.
type dialer struct {
	allow        AllowList
	allowPrivate bool
	// lookup resolves a name to its addresses; dial connects to an
	// ip:port. Tests replace them.
	lookup func(ctx context.Context, host string) ([]netip.Addr, error)
	dial   func(ctx context.Context, network, address string) (net.Conn, error)
}

func newDialer(allow AllowList, allowPrivate bool, timeout time.Duration) *dialer {
	d := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: allow.control}
	return &dialer{
		allow:        allow,
		allowPrivate: allowPrivate,
		lookup: func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		},
		dial: d.DialContext,
	}
}

// DialContext is the transport's dial function; address is the URL's
// host:port.
func (d *dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	h, p, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("webhook: dial %s: %w", address, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return nil, fmt.Errorf("webhook: dial %s: bad port", address)
	}
	host, ip, isIP := canonicalHost(h)
	e, ok := d.allow.match(host, isIP, port)
	if !ok {
		return nil, fmt.Errorf("webhook: dial %s refused: not in --webhook-allow", net.JoinHostPort(host, p))
	}
	ips := []netip.Addr{ip}
	if !isIP {
		if ips, err = d.lookup(ctx, host); err != nil {
			return nil, fmt.Errorf("webhook: resolve %s: %w", host, err)
		}
	}
	var errs []error
	for _, ip := range ips {
		if err := d.allow.allowsIP(e, ip, port, d.allowPrivate); err != nil {
			errs = append(errs, err)
			continue
		}
		conn, err := d.dial(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("webhook: dial %s: %s resolves to no address", address, host)
	}
	return nil, fmt.Errorf("webhook: dial %s refused or failed: %w", net.JoinHostPort(host, p), errors.Join(errs...))
}

// control is a net.Dialer Control function, a last guard under dialer: it
// refuses to connect to a restricted address that is not listed with the
// port dialled.
func (a AllowList) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook: dial %s: unexpected address: %w", address, err)
	}
	if ip := ap.Addr().Unmap(); restricted(ip) && !a.listed(ip, int(ap.Port())) {
		return fmt.Errorf("webhook: dial %s refused: loopback and link-local addresses are allowed only when listed in --webhook-allow", address)
	}
	return nil
}
