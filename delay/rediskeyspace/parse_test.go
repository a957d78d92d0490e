package rediskeyspace

import (
	"testing"

	"github.com/hourglass/hourglass"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		key    string
		ok     bool
		id, ms int64
	}{
		{"ns:order:42:1700000000123", true, 42, 1700000000123},
		{"ns:order:-1:5", true, -1, 5},
		{"other:order:42:1700000000123", false, 0, 0}, // another namespace
		{"ns:order:42", false, 0, 0},                  // no deadline
		{"ns:order:42:x", false, 0, 0},
		{"ns:order:x:5", false, 0, 0},
		{"ns:order:42:5:6", false, 0, 0},
		{"ns:order:42:-5", false, 0, 0},
		{"ns:index", false, 0, 0},
		{"ns:order:", false, 0, 0},
	} {
		got, ok := parseKey("ns:order:", tc.key)
		if ok != tc.ok || (ok && (got.ID != tc.id || hourglass.UnixMilli(got.At) != tc.ms)) {
			t.Errorf("parseKey(%q) = %v, %v; want %d:%d, %v", tc.key, got, ok, tc.id, tc.ms, tc.ok)
		}
	}
}

func TestWithExpiredEvents(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "Ex", false},
		{"Ex", "Ex", true},
		{"xE", "xE", true},
		{"AKE", "AKE", true}, // A includes x
		{"K", "KEx", false},
		{"Kx", "KxE", false},
		{"Eg", "Egx", false},
	} {
		got, ok := withExpiredEvents(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("withExpiredEvents(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
