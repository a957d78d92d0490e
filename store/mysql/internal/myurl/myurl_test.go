package myurl

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	c, err := Parse("mysql://app:p%40ss@db.example:3307/shop?tls=preferred&timeout=2s")
	if err != nil {
		t.Fatal(err)
	}
	if c.User != "app" || c.Passwd != "p@ss" || c.Addr != "db.example:3307" || c.DBName != "shop" || c.TLSConfig != "preferred" || c.Timeout != 2*time.Second {
		t.Fatalf("parsed %+v", c)
	}
	c, err = Parse("mysql://root@[::1]/hg")
	if err != nil || c.Addr != "[::1]:3306" || c.Passwd != "" {
		t.Fatalf("default port: %+v, %v", c, err)
	}
	for _, raw := range []string{"mysql://u:secretpw@h:3306/db?tls=on", "mysql://u:secretpw@h:3306/", "mysql://u:secretpw@h:x/db", "http://u:secretpw@h/db", "u:secretpw@h/db", "mysql://u:secretpw@h/db?x=1", "mysql://u@h/db?password=secretpw", "mysql://u@h/db?tls=on&pwd=secretpw"} {
		_, err := Parse(raw)
		if err == nil || strings.Contains(err.Error(), "secretpw") {
			t.Errorf("Parse(%q) = %v; want an error without the password", raw, err)
		}
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"mysql://u:pw@h:1/db":                 "mysql://u:xxxxx@h:1/db",
		"mysql://u:p%zz@h:1/db":               "mysql://u:xxxxx@h:1/db",
		"mysql://u@h/db":                      "mysql://u@h/db",
		"mysql://u@h/db?password=pw&tls=true": "mysql://u@h/db?password=xxxxx&tls=true",
		"garbage with pw":                     "(unparsable URL)",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
	}
}
