package main

import (
	"strings"
	"testing"
)

// TestBeforeCloseFlags: the payment check's flags reach node.BeforeClose,
// and each bad value is refused with one line naming its flag.
func TestBeforeCloseFlags(t *testing.T) {
	t.Parallel()
	ok := beforeCloseFlags{BeforeCloseURL: "https://pay.internal/check", BeforeCloseSecret: "s", BeforeCloseOnError: "close", BeforeCloseMaxFailures: 3}
	c, err := ok.config(false)
	if err != nil || c.URL != ok.BeforeCloseURL || c.Secret != "s" || c.OnError != "close" || c.MaxFailures != 3 {
		t.Fatalf("config() = %+v, %v", c, err)
	}
	if _, err := (&beforeCloseFlags{BeforeCloseOnError: "wait", BeforeCloseMaxFailures: 10}).config(false); err != nil {
		t.Fatalf("the defaults without a URL: %v", err)
	}
	for _, tt := range []struct {
		name string
		f    beforeCloseFlags
		want string
	}{
		{"not http", beforeCloseFlags{BeforeCloseURL: "ftp://pay/", BeforeCloseOnError: "wait", BeforeCloseMaxFailures: 10}, "--before-close-url"},
		{"no host", beforeCloseFlags{BeforeCloseURL: "http://", BeforeCloseOnError: "wait", BeforeCloseMaxFailures: 10}, "--before-close-url"},
		{"unknown on-error", beforeCloseFlags{BeforeCloseURL: "http://pay/", BeforeCloseOnError: "retry", BeforeCloseMaxFailures: 10}, "--before-close-on-error"},
		{"max failures", beforeCloseFlags{BeforeCloseURL: "http://pay/", BeforeCloseOnError: "close", BeforeCloseMaxFailures: 0}, "--before-close-max-failures"},
		{"secret without URL", beforeCloseFlags{BeforeCloseSecret: "s", BeforeCloseOnError: "wait", BeforeCloseMaxFailures: 10}, "--before-close-secret"},
	} {
		_, err := tt.f.config(false)
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line starting %s", tt.name, err, tt.want)
		}
	}
}
