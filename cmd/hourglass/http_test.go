package main

import (
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/hourglass/hourglass/api"
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

// TestTokenFlags: --api-token and --viewer-token (or their environment
// variables) list tokens separated by commas, with white space around them
// dropped; an empty item stays in the list for api.CheckTokens to refuse by
// its place, and no flag means no token.
func TestTokenFlags(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	for _, tt := range []struct {
		name            string
		args, env       []string
		tokens, viewers []string
		err             string // from api.CheckTokens; "" for none
	}{
		{"none", nil, nil, nil, nil, ""},
		{"one", []string{"--api-token", "op"}, nil, []string{"op"}, nil, ""},
		{"rotation", []string{"--api-token", "new, old", "--viewer-token", "v-new,v-old"}, nil, []string{"new", "old"}, []string{"v-new", "v-old"}, ""},
		{"environment", nil, []string{"HOURGLASS_API_TOKEN", "a,b", "HOURGLASS_VIEWER_TOKEN", "v"}, []string{"a", "b"}, []string{"v"}, ""},
		{"empty item", []string{"--api-token", "a,,b"}, nil, []string{"a", "", "b"}, nil, "--api-token: item 2 of 3 is empty"},
		{"trailing comma", []string{"--api-token", "a", "--viewer-token", "v,"}, nil, []string{"a"}, []string{"v", ""}, "--viewer-token: item 2 of 2 is empty"},
		{"blank", nil, []string{"HOURGLASS_API_TOKEN", " "}, []string{""}, nil, "--api-token: item 1 of 1 is empty"},
		{"both", []string{"--api-token", "a,shared", "--viewer-token", "shared"}, nil, []string{"a", "shared"}, []string{"shared"}, "item 2 of --api-token is also item 1 of --viewer-token"},
		{"viewer alone", []string{"--viewer-token", "v"}, nil, nil, []string{"v"}, "--viewer-token needs --api-token"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, name := range []string{"HOURGLASS_API_TOKEN", "HOURGLASS_VIEWER_TOKEN"} {
				t.Setenv(name, "")
			}
			for i := 0; i < len(tt.env); i += 2 {
				t.Setenv(tt.env[i], tt.env[i+1])
			}
			s, err := parseServe(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := s.config(log)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Tokens, tt.tokens) || !slices.Equal(cfg.ViewerTokens, tt.viewers) {
				t.Errorf("tokens %q, viewers %q; want %q, %q", cfg.Tokens, cfg.ViewerTokens, tt.tokens, tt.viewers)
			}
			err = api.CheckTokens(cfg.Tokens, cfg.ViewerTokens)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("api.CheckTokens: %v; want %q", err, tt.err)
			}
		})
	}
}
