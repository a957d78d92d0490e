package main

import (
	"strings"
	"testing"
)

func TestMaxConnections(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      int
		ok      bool
		atLeast int
	}{
		{0, true, 64}, {1, true, 1}, {50000, true, 50000}, {-1, false, 0}, {1_000_001, false, 0},
	} {
		n, err := maxConnections(tt.in)
		if (err == nil) != tt.ok || tt.ok && (n < tt.atLeast || n > max(tt.in, maxConnectionsDefault)) {
			t.Errorf("maxConnections(%d) = %d, %v", tt.in, n, err)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "--max-connections")) {
			t.Errorf("maxConnections(%d): error %v does not name the flag", tt.in, err)
		}
	}
}
