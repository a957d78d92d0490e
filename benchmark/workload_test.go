package benchmark

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseTimeouts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in       string
		scale    float64
		min, max time.Duration
		mix, ok  bool
	}{
		{"2s", 0, 2 * time.Second, 2 * time.Second, false, true},
		{"1s..10s", 0, time.Second, 10 * time.Second, false, true},
		{"mix", 0.01, 0, 0, true, true},
		{"mix", 0.001, 0, 0, true, false}, // 5 min × 0.001 = 300 ms: below the 1 s floor
		{"500ms", 0, 0, 0, false, false},
		{"10s..1s", 0, 0, 0, false, false},
		{"8d", 0, 0, 0, false, false},
		{"soon", 0, 0, 0, false, false},
	}
	for _, tt := range tests {
		got, err := ParseTimeouts(tt.in, tt.scale)
		if (err == nil) != tt.ok {
			t.Errorf("ParseTimeouts(%q, %v) error = %v, want ok=%v", tt.in, tt.scale, err, tt.ok)
			continue
		}
		if err == nil && (got.Min != tt.min || got.Max != tt.max || got.Mix != tt.mix) {
			t.Errorf("ParseTimeouts(%q) = %+v", tt.in, got)
		}
	}
}

func TestTimeoutsDraw(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	rng, _ := ParseTimeouts("1s..3s", 0)
	mix, _ := ParseTimeouts("mix", 0.01)
	seen := map[time.Duration]int{}
	for range 10000 {
		d := rng.Draw(r)
		if d < time.Second || d > 3*time.Second || d%time.Millisecond != 0 {
			t.Fatalf("range draw %s outside 1s..3s or not whole ms", d)
		}
		seen[mix.Draw(r)]++
	}
	if len(seen) != 2 || seen[3*time.Second] < 4500 || seen[18*time.Second] < 4500 {
		t.Fatalf("mix draws %v, want about half 3s and half 18s", seen)
	}
	if mix.Longest() != 18*time.Second || rng.Longest() != 3*time.Second {
		t.Fatalf("Longest: mix %s range %s", mix.Longest(), rng.Longest())
	}
}
