package testenv

import (
	"slices"
	"sync"
	"testing"
)

func TestSelected(t *testing.T) {
	for _, tt := range []struct {
		env  string
		want []Tier
	}{
		{"", []Tier{Default}},
		{"processes", []Tier{Processes}},
		{" matrix , default ", []Tier{Default, Matrix}},
		{"outage,full", []Tier{Outage, Full}},
		{"processes,brokers", []Tier{Processes, Brokers}},
	} {
		t.Run(tt.env, func(t *testing.T) {
			t.Setenv(TierEnv, tt.env)
			for _, tier := range Tiers() {
				if got, want := Selected(tier), slices.Contains(tt.want, tier); got != want {
					t.Errorf("%s=%q: Selected(%s) = %v, want %v", TierEnv, tt.env, tier, got, want)
				}
			}
		})
	}
}

// ran runs body as a subtest named name and reports whether it ran to its
// end (not skipped).
func ran(t *testing.T, name string, body func(t *testing.T)) bool {
	t.Helper()
	done := false
	t.Run(name, func(t *testing.T) {
		body(t)
		done = !t.Skipped()
	})
	return done
}

func TestRequire(t *testing.T) {
	t.Setenv(TierEnv, "processes")
	if !ran(t, "stated", func(t *testing.T) {
		Require(t, Processes)
		if !ran(t, "sub", func(t *testing.T) { RequireDefault(t) }) {
			t.Error("RequireDefault skipped a subtest of a test that stated a selected tier")
		}
	}) {
		t.Error("Require(Processes) skipped with processes selected")
	}
	if ran(t, "default", func(t *testing.T) { RequireDefault(t) }) {
		t.Error("RequireDefault ran a test that stated no tier, in a processes run")
	}
	if ran(t, "other", func(t *testing.T) { Require(t, Outage, Full) }) {
		t.Error("Require(Outage, Full) ran in a processes run")
	}
}

func TestEveryCase(t *testing.T) {
	stores := []string{"sqlite", "postgres", "mysql"}
	delays := []string{"wheel", "heap", "redis"}
	for _, tt := range []struct {
		name, env, store, delay string
		want                    []Case
	}{
		{"default", "", "", "", []Case{{"sqlite", "wheel"}}},
		{"developer's case", "", "postgres", "redis", []Case{{"postgres", "redis"}}},
		{"matrix", "matrix", "", "", []Case{{"sqlite", "heap"}, {"sqlite", "redis"}, {"postgres", "wheel"}, {"mysql", "wheel"}}},
		{"both", "default,matrix", "", "", []Case{{"sqlite", "wheel"}, {"sqlite", "heap"}, {"sqlite", "redis"}, {"postgres", "wheel"}, {"mysql", "wheel"}}},
		{"neither", "outage", "", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(TierEnv, tt.env)
			t.Setenv(StoreEnv, tt.store)
			t.Setenv(DelayEnv, tt.delay)
			var (
				mu  sync.Mutex
				got []Case
			)
			ran(t, "test", func(t *testing.T) {
				EveryCase(t, Default, stores, delays, func(t *testing.T) {
					mu.Lock()
					got = append(got, Case{Store(t, "sqlite"), Delay(t, "wheel")})
					mu.Unlock()
				})
			})
			if !slices.Equal(got, tt.want) {
				t.Errorf("cases %v, want %v", got, tt.want)
			}
		})
	}
	t.Run("one dimension", func(t *testing.T) {
		t.Setenv(TierEnv, "matrix")
		var names []string
		t.Run("test", func(t *testing.T) {
			EveryCase(t, Processes, stores, nil, func(t *testing.T) { names = append(names, t.Name()) })
		})
		if want := []string{"TestEveryCase/one_dimension/test/postgres", "TestEveryCase/one_dimension/test/mysql"}; !slices.Equal(names, want) {
			t.Errorf("subtests %v, want %v", names, want)
		}
	})
}
