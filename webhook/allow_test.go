package webhook

import (
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
		{"127.0.0.1:9", "127.0.0.1:8080", true}, // the URL check holds the port
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
