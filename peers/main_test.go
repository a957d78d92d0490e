package main

import (
	"regexp"
	"testing"
	"time"

	"github.com/hourglass/hourglass/benchmark"
)

func TestPeers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		peers string
		want  []string // nil: an error
	}{
		{"asynq,asynq-tuned,river,river-tuned", []string{"asynq", "asynq-tuned", "river", "river-tuned"}},
		{" river-tuned , asynq ", []string{"river-tuned", "asynq"}},
		{"none", []string{}},
		{"", []string{}},
		{"sidekiq", nil},
		{"river,river", nil},
	} {
		t.Run(tc.peers, func(t *testing.T) {
			t.Parallel()
			c := cli{Peers: tc.peers, Bench: benchmark.Command{}}
			got, err := c.peers()
			if tc.want == nil {
				if err == nil {
					t.Fatalf("peers(%q) = %d systems, want an error", tc.peers, len(got))
				}
				return
			}
			if err != nil {
				t.Fatalf("peers(%q): %v", tc.peers, err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("peers(%q) = %d systems, want %v", tc.peers, len(got), tc.want)
			}
			for i, s := range got {
				if s.Name != tc.want[i] || s.Open == nil {
					t.Errorf("system %d = %q, want %q with an Open", i, s.Name, tc.want[i])
				}
			}
		})
	}
}

func TestBenchSchema(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 123456789)
	valid := regexp.MustCompile(`^[a-z_][a-z0-9_]{0,45}$`)
	for _, ns := range []string{"hourglass", "My-Team.Prod", "", "9lives", "a-very-long-namespace-that-goes-on-and-on-and-on"} {
		got := benchSchema(ns, now)
		if !valid.MatchString(got) {
			t.Errorf("benchSchema(%q) = %q, not a schema River accepts", ns, got)
		}
	}
	if got, want := benchSchema("hourglass", now), "hourglass_bench_1800000000123456789"; got != want {
		t.Errorf("benchSchema(hourglass) = %q, want %q", got, want)
	}
}
