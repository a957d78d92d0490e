package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"postgres://u:pw@h:5432/db", "postgres://u:xxxxx@h:5432/db"},
		{"postgres://u@h/db?password=hunter2x&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgresql://u@h/db?sslmode=require&sslpassword=hunter2x", "postgresql://u@h/db?sslmode=require&sslpassword=xxxxx"},
		{"postgres://u@h/db?PassWord=hunter2x&passwd=hunter2x&pwd=hunter2x&client_secret=hunter2x", "postgres://u@h/db?PassWord=xxxxx&passwd=xxxxx&pwd=xxxxx&client_secret=xxxxx"},
		{"postgres://u@h/db?pass%77ord=hunter2x", "postgres://u@h/db?pass%77ord=xxxxx"},
		{"postgres://u:pw@h/db?password=hunter2x", "postgres://u:xxxxx@h/db?password=xxxxx"},
		{"mysql://u:pw@h:1/db", "mysql://u:xxxxx@h:1/db"},
		{"mysql://u:p%zz@h:1/db", "mysql://u:xxxxx@h:1/db"},
		{"mysql://u:p%zz@h:1/db?password=hunter2x", "mysql://u:xxxxx@h:1/db?password=xxxxx"},
		{"mysql://u@h/db", "mysql://u@h/db"},
		{"sqlite:///var/lib/hg.db", "sqlite:///var/lib/hg.db"},
		{"garbage with pw", "(unparsable URL)"},
		{"u:hunter2x@h/db", "u:xxxxx@h/db"},
		// A go-sql-driver DSN keeps its user and address.
		{"root:hunter2x@tcp(127.0.0.1:3306)/test?parseTime=true", "root:xxxxx@tcp(127.0.0.1:3306)/test?parseTime=true"},
		{"root@tcp(127.0.0.1:3306)/test", "root@tcp(127.0.0.1:3306)/test"},
		{"hunter2x@h/db", "xxxxx@h/db"},
		// Webhooks and payment checks: every query value, user and password.
		{"http://u:hunter2x@127.0.0.1:1/pay?token=abc123&v=2#frag", "http://xxxxx:xxxxx@127.0.0.1:1/pay?token=xxxxx&v=xxxxx"},
		{"https://sk_live_k3y@api.example/v1", "https://xxxxx@api.example/v1"},
		{"https://shop.example/hook?sig=abcd", "https://shop.example/hook?sig=xxxxx"},
		{"https://shop.example/hook", "https://shop.example/hook"},
		// Brokers: secret-named parameters, a NATS token, a server list.
		{"amqp://u:hunter2x@h:5672/vh/ex?routing_key=orders&api_key=k1", "amqp://u:xxxxx@h:5672/vh/ex?routing_key=orders&api_key=xxxxx"},
		{"redis://:hunter2x@h:6379/0?stream=events", "redis://:xxxxx@h:6379/0?stream=events"},
		{"nats://s3cr3tToken@h:4222/subj", "nats://xxxxx@h:4222/subj"},
		{"nats://a:hunter2x@h1:4222,nats://tok@h2:4222", "nats://a:xxxxx@h1:4222,nats://xxxxx@h2:4222"},
		{"kafka://h1:9092,h2:9092/topic?token=t0k3n", "kafka://h1:9092,h2:9092/topic?token=xxxxx"},
		{"postgres://u@h/db?sslmode=verify-full&sslkey=/k.pem&target_session_attrs=read-write", "postgres://u@h/db?sslmode=verify-full&sslkey=/k.pem&target_session_attrs=read-write"},
	} {
		if got := URL(tt.raw); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.raw, got, tt.want)
		}
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ msg, raw, leak string }{
		{"cannot parse `postgres://u:pw@h/db`", "postgres://u:pw@h/db", "pw@"},
		{"bad postgres://u:p@ss@host/db here", "postgres://u:p@ss@host/db", "p@ss"},
		{"user=u password=hunter2x", "postgres://u:hunter2x@h/db", "hunter2x"},
		{"user=u password=hunter2x host=h", "postgres://u@h/db?password=hunter2x", "hunter2x"},
		{"cannot parse `postgres://u@h/db?password=hunter2x`", "postgres://u@h/db?password=hunter2x", "hunter2x"},
		{"failed: sslpassword='hunter 2x' invalid", "postgres://u@h/db", "hunter 2x"},
		{"escaped hunter%2Fx", "postgres://u@h/db?password=hunter%2Fx", "hunter%2Fx"},
		// net/http's *url.Error quotes the whole URL.
		{`Post "http://u:hunter2x@127.0.0.1:1/pay?token=t0k3n": dial tcp 127.0.0.1:1: connect: connection refused`, "", "t0k3n"},
		{`Post "http://u:hunter2x@127.0.0.1:1/pay?token=t0k3n": dial tcp`, "", "hunter2x"},
		{`parse "mysql://u:p%zz@h/db": invalid URL escape "%zz"`, "mysql://u:p%zz@h/db", "p%zz"},
	} {
		if got := Scrub(tt.msg, tt.raw); strings.Contains(got, tt.leak) {
			t.Errorf("Scrub(%q) = %q, still shows %q", tt.msg, got, tt.leak)
		}
	}
}

func TestSecretName(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]bool{
		"password": true, "PassWord": true, "sslpassword": true, "token": true, "access_token": true,
		"api_key": true, "API-Key": true, "apikey": true, "key": true, "sig": true, "signature": true,
		"auth": true, "client_secret": true, "X-Amz-Signature": true, "X-Amz-Credential": true,
		"routing_key": false, "sslkey": false, "sslmode": false, "stream": false, "maxlen": false,
		"tls": false, "timeout": false, "target_session_attrs": false,
	} {
		if got := SecretName(name); got != want {
			t.Errorf("SecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestErr(t *testing.T) {
	t.Parallel()
	if Err(nil) != nil {
		t.Fatal("Err(nil) is not nil")
	}
	cause := errors.New(`Post "https://shop.example/pay?token=t0k3n": EOF`)
	err := fmt.Errorf("beforeclose: %w", Err(cause))
	if strings.Contains(err.Error(), "t0k3n") || !strings.Contains(err.Error(), "shop.example/pay?token=xxxxx") {
		t.Errorf("Err: %q", err)
	}
	if !errors.Is(err, cause) {
		t.Error("errors.Is no longer finds the cause")
	}
}

// FuzzURL: whatever the password and the token, and however they break
// the URL's syntax, URL and Scrub never echo them.
func FuzzURL(f *testing.F) {
	for _, s := range [][3]string{{"postgres", "hunter2x", "t0k3nval"}, {"http", "p@ss:w/rd", "a&b=c"}, {"mysql", "p%zz%", "x y z"}, {"nats", "", "tokentok"}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, scheme, password, token string) {
		if len(password) < 6 || len(token) < 6 || strings.ContainsAny(password+token, "\x00\n\r\t ") {
			t.Skip()
		}
		raw := scheme + "://hguser:" + password + "@db.example:5432/shop?sslmode=verify-full&token=" + token
		if strings.Contains(strings.Replace(raw, password, "", 1), password) || strings.Contains(strings.Replace(raw, token, "", 1), token) {
			t.Skip() // the secret is also written elsewhere in the URL
		}
		for _, got := range []string{URL(raw), Scrub("connect "+raw+": refused", raw)} {
			if strings.Contains(got, password) {
				t.Errorf("%q shows the password %q", got, password)
			}
			if u, err := url.Parse(raw); err == nil && u.Query().Get("token") == token && strings.Contains(got, token) {
				t.Errorf("%q shows the token %q", got, token)
			}
		}
	})
}
