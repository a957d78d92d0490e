package webhook

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/hourglass/hourglass"
)

func TestParseAllowList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    string // String() of the result, or the error's text
		wantErr bool
	}{
		{"", "", false},
		{" hooks.example.com , ,127.0.0.1:8080,[::1]:9000,::1,*.Example.COM.,localhost", "hooks.example.com,127.0.0.1:8080,[::1]:9000,::1,*.example.com,localhost", false},
		{"h:0", "port", true},
		{"h:99999", "port", true},
		{"h:x", `port "x"`, true},
		{"https://h/x", "not a URL", true},
		{"10.0.0.0/8", "not a URL or a network", true},
		{"a..b", "not a valid host name", true},
		{"*", "not a valid host name", true},
		{"a.*.com", "leading", true},
		{"*.", "not a valid host name", true},
		{"*..", "no host", true},
	}
	for _, tt := range tests {
		a, err := ParseAllowList(tt.in)
		switch {
		case tt.wantErr && (err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "allow-list entry")):
			t.Errorf("ParseAllowList(%q) = %v, want an error with %q", tt.in, err, tt.want)
		case !tt.wantErr && err != nil:
			t.Errorf("ParseAllowList(%q): %v", tt.in, err)
		case !tt.wantErr && a.String() != tt.want:
			t.Errorf("ParseAllowList(%q) = %q, want %q", tt.in, a.String(), tt.want)
		}
	}
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	a, err := ParseAllowList("hooks.example.com,api.example.com:8443,*.shop.test,10.0.0.7,[::1]:9000,127.0.0.1:8080")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url  string
		want string // "" allowed; else in the message
	}{
		{"https://hooks.example.com/x", ""},
		{"http://HOOKS.example.com.:81/x", ""},
		{"https://api.example.com:8443/x", ""},
		{"https://api.example.com/x", "host api.example.com:443 is not in the webhook allow-list"},
		{"https://a.shop.test/x", ""},
		{"https://a.b.shop.test/x", ""},
		{"https://shop.test/x", "host shop.test:443"},
		{"https://evilshop.test/x", "host evilshop.test:443"},
		{"http://10.0.0.7:1234/x", ""},
		{"http://[::1]:9000/x", ""},
		{"http://[::1]:9001/x", "loopback and link-local addresses are allowed only when listed"},
		{"http://127.0.0.1:8080/x", ""},
		{"http://127.0.0.1.:8080/x", ""},
		{"http://127.0.0.1.:8081/x", "host 127.0.0.1:8081 is not in the webhook allow-list"},
		{"http://127.0.0.1:8081/x", "loopback"},
		{"http://localhost:8080/x", "loopback"},
		{"http://169.254.169.254/latest/meta-data", "loopback and link-local"},
		{"http://0.0.0.0:8080/x", "not in the webhook allow-list"},
	}
	for _, tt := range tests {
		err := a.CheckURL(tt.url)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("CheckURL(%s): %v", tt.url, err)
		case tt.want != "" && (hourglass.ErrorCode(err) != hourglass.CodeInvalidArgument || !strings.Contains(hourglass.ErrorMessage(err), tt.want)):
			t.Errorf("CheckURL(%s) = %v, want invalid_argument with %q", tt.url, err, tt.want)
		}
	}
	if err := (AllowList{}).CheckURL("https://hooks.example.com/"); err == nil || !strings.Contains(err.Error(), "allow-list is empty") {
		t.Errorf("empty allow-list: %v", err)
	}
}

// TestDialGuard: whatever name resolved to it, a loopback or link-local
// address is dialled only when listed.
func TestDialGuard(t *testing.T) {
	t.Parallel()
	tests := []struct {
		allow, addr string
		ok          bool
	}{
		{"hooks.example.com", "93.184.216.34:443", true},
		{"hooks.example.com", "10.1.2.3:443", true},
		{"hooks.example.com", "127.0.0.1:443", false},
		{"hooks.example.com", "[::1]:443", false},
		{"hooks.example.com", "169.254.169.254:80", false},
		{"hooks.example.com", "[fe80::1]:80", false},
		{"hooks.example.com", "0.0.0.0:80", false},
		{"127.0.0.1", "127.0.0.1:8080", true},
		{"127.0.0.1", "127.0.0.2:8080", false},
		{"127.0.0.1:9", "127.0.0.1:8080", false}, // listed with another port
		{"127.0.0.1:8080", "127.0.0.1:8080", true},
		{"localhost:9", "127.0.0.1:8080", false},
		{"localhost", "127.0.0.1:8080", true},
		{"localhost", "[::1]:8080", true},
		{"localhost", "169.254.169.254:80", false},
		{"::1", "[::ffff:127.0.0.1]:80", false},
		{"127.0.0.1", "[::ffff:127.0.0.1]:80", true},
	}
	for _, tt := range tests {
		a, err := ParseAllowList(tt.allow)
		if err != nil {
			t.Fatal(err)
		}
		err = a.control("tcp", tt.addr, nil)
		if (err == nil) != tt.ok {
			t.Errorf("allow %q, dial %s: %v, want ok=%v", tt.allow, tt.addr, err, tt.ok)
		}
	}
}

// TestDialerChecksWhatItDials: the delivery dialer resolves the host itself
// and dials only an address allowed for the entry that matched the URL's
// host and port. Issue 11: the port of a listed loopback IP was ignored
// (point 3), a wildcard name reached private networks (point 4), and
// "127.0.0.1." was checked as an IP but resolved as a name (point 5).
func TestDialerChecksWhatItDials(t *testing.T) {
	t.Parallel()
	dns := map[string][]string{
		"vm":                 {"127.0.0.1"},
		"hooks.example.com":  {"93.184.216.34"},
		"a.example.com":      {"10.1.2.3"},
		"b.example.com":      {"100.64.0.9"},
		"c.example.com":      {"fd00::5"},
		"d.example.com":      {"192.168.1.1", "93.184.216.35"},
		"e.example.com":      {"172.16.0.1"},
		"f.example.com":      {"127.0.0.1"},
		"g.example.com":      {"169.254.169.254"},
		"internal.corp":      {"10.0.0.7"},
		"localhost":          {"127.0.0.1", "::1"},
		"public.example.com": {"93.184.216.36"},
	}
	tests := []struct {
		name, allow string
		private     bool
		addr        string // as the transport gives it: the URL's host:port
		want        string // the address dialled, or "" for refused
		wantLookups []string
	}{
		{"listed IP with its port", "127.0.0.1:18199,vm:18200", false, "127.0.0.1:18199", "127.0.0.1:18199", nil},
		{"name resolving to a loopback IP listed with another port", "127.0.0.1:18199,vm:18200", false, "vm:18200", "", []string{"vm"}},
		{"name resolving to a loopback IP listed with its port", "127.0.0.1:18200,vm:18200", false, "vm:18200", "127.0.0.1:18200", []string{"vm"}},
		{"name resolving to a loopback IP listed with any port", "127.0.0.1,vm", false, "vm:18200", "127.0.0.1:18200", []string{"vm"}},
		{"localhost listed with another port", "localhost:9", false, "localhost:8080", "", nil},
		{"localhost listed with its port", "localhost:8080", false, "localhost:8080", "127.0.0.1:8080", []string{"localhost"}},
		{"IP with a trailing dot is not looked up", "127.0.0.1", false, "127.0.0.1.:8080", "127.0.0.1:8080", nil},
		{"IP with a trailing dot, other port", "127.0.0.1:9", false, "127.0.0.1.:8080", "", nil},
		{"name with a trailing dot", "hooks.example.com", false, "HOOKS.example.com.:443", "93.184.216.34:443", []string{"hooks.example.com"}},
		{"exact name, public", "hooks.example.com", false, "hooks.example.com:443", "93.184.216.34:443", []string{"hooks.example.com"}},
		{"exact name, private", "internal.corp", false, "internal.corp:443", "10.0.0.7:443", []string{"internal.corp"}},
		{"listed private IP", "10.0.0.7", false, "10.0.0.7:80", "10.0.0.7:80", nil},
		{"wildcard, public", "*.example.com", false, "public.example.com:443", "93.184.216.36:443", []string{"public.example.com"}},
		{"wildcard, RFC 1918", "*.example.com", false, "a.example.com:443", "", []string{"a.example.com"}},
		{"wildcard, 172.16/12", "*.example.com", false, "e.example.com:443", "", []string{"e.example.com"}},
		{"wildcard, CGNAT", "*.example.com", false, "b.example.com:443", "", []string{"b.example.com"}},
		{"wildcard, unique-local", "*.example.com", false, "c.example.com:443", "", []string{"c.example.com"}},
		{"wildcard, loopback", "*.example.com", false, "f.example.com:443", "", []string{"f.example.com"}},
		{"wildcard, metadata", "*.example.com", false, "g.example.com:80", "", []string{"g.example.com"}},
		{"wildcard, private skipped for a public address", "*.example.com", false, "d.example.com:443", "93.184.216.35:443", []string{"d.example.com"}},
		{"wildcard, private allowed", "*.example.com", true, "a.example.com:443", "10.1.2.3:443", []string{"a.example.com"}},
		{"wildcard, CGNAT allowed", "*.example.com", true, "b.example.com:443", "100.64.0.9:443", []string{"b.example.com"}},
		{"wildcard, loopback even when private allowed", "*.example.com", true, "f.example.com:443", "", []string{"f.example.com"}},
		{"wildcard, a name also listed exactly", "*.example.com,a.example.com", false, "a.example.com:443", "10.1.2.3:443", []string{"a.example.com"}},
		{"wildcard, private IP listed", "*.example.com,10.1.2.3:443", false, "a.example.com:443", "10.1.2.3:443", []string{"a.example.com"}},
		{"not listed", "hooks.example.com", false, "public.example.com:443", "", nil},
		{"listed with another port", "hooks.example.com:8443", false, "hooks.example.com:443", "", nil},
	}
	for _, tt := range tests {
		a, err := ParseAllowList(tt.allow)
		if err != nil {
			t.Fatal(err)
		}
		var lookups, dialled []string
		d := &dialer{allow: a, allowPrivate: tt.private,
			lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
				lookups = append(lookups, host)
				var out []netip.Addr
				for _, s := range dns[host] {
					out = append(out, netip.MustParseAddr(s))
				}
				if out == nil {
					return nil, errors.New("no such host")
				}
				return out, nil
			},
			dial: func(_ context.Context, _, address string) (net.Conn, error) {
				dialled = append(dialled, address)
				c1, c2 := net.Pipe()
				c2.Close()
				return c1, nil
			},
		}
		conn, err := d.DialContext(t.Context(), "tcp", tt.addr)
		if conn != nil {
			conn.Close()
		}
		switch {
		case tt.want == "" && (err == nil || len(dialled) > 0):
			t.Errorf("%s: allow %q, dial %s: dialled %v, err %v; want refused", tt.name, tt.allow, tt.addr, dialled, err)
		case tt.want != "" && (err != nil || !slices.Equal(dialled, []string{tt.want})):
			t.Errorf("%s: allow %q, dial %s: dialled %v, err %v; want %s", tt.name, tt.allow, tt.addr, dialled, err, tt.want)
		}
		if !slices.Equal(lookups, tt.wantLookups) {
			t.Errorf("%s: looked up %q, want %q", tt.name, lookups, tt.wantLookups)
		}
	}
}
