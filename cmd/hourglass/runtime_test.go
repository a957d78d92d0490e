package main

import (
	"math"
	"strings"
	"testing"
)

// TestRuntimeFlags: the GC flags resolve against GOGC and GOMEMLIMIT (a
// flag given wins, an empty one leaves the variable to the runtime), and a
// value out of range, or the collector off without a limit, is refused
// with a message naming the flag.
func TestRuntimeFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		flags   runtimeFlags
		env     map[string]string
		want    gcSettings
		wantErr string // "" for no error
	}{
		{name: "defaults", want: gcSettings{percent: GCPercentDefault, limit: math.MaxInt64}},
		{name: "GOGC kept", env: map[string]string{"GOGC": "150"}, want: gcSettings{keepPercent: true, limit: math.MaxInt64}},
		{name: "flag over GOGC", flags: runtimeFlags{GCPercent: "200"}, env: map[string]string{"GOGC": "150"},
			want: gcSettings{percent: 200, limit: math.MaxInt64}},
		{name: "GOMEMLIMIT kept", env: map[string]string{"GOMEMLIMIT": "1GiB"}, want: gcSettings{percent: GCPercentDefault, keepLimit: true}},
		{name: "limit", flags: runtimeFlags{MemoryLimit: "512MiB"}, want: gcSettings{percent: GCPercentDefault, limit: 512 << 20}},
		{name: "limit in bytes", flags: runtimeFlags{MemoryLimit: "67108864"}, want: gcSettings{percent: GCPercentDefault, limit: 64 << 20}},
		{name: "off with a limit", flags: runtimeFlags{GCPercent: "off", MemoryLimit: "2GiB"}, want: gcSettings{percent: -1, limit: 2 << 30}},
		{name: "off with GOMEMLIMIT", flags: runtimeFlags{GCPercent: "off"}, env: map[string]string{"GOMEMLIMIT": "1GiB"},
			want: gcSettings{percent: -1, keepLimit: true}},
		{name: "off alone", flags: runtimeFlags{GCPercent: "off"}, wantErr: "--gc-percent off needs --memory-limit"},
		{name: "percent too low", flags: runtimeFlags{GCPercent: "5"}, wantErr: "--gc-percent"},
		{name: "percent too high", flags: runtimeFlags{GCPercent: "20000"}, wantErr: "--gc-percent"},
		{name: "percent not a number", flags: runtimeFlags{GCPercent: "-1"}, wantErr: "--gc-percent"},
		{name: "limit too low", flags: runtimeFlags{MemoryLimit: "1MiB"}, wantErr: "--memory-limit"},
		{name: "limit in decimal units", flags: runtimeFlags{MemoryLimit: "3GB"}, wantErr: "--memory-limit"},
		{name: "limit negative", flags: runtimeFlags{MemoryLimit: "-1GiB"}, wantErr: "--memory-limit"},
		{name: "limit overflows", flags: runtimeFlags{MemoryLimit: "9999999999TiB"}, wantErr: "--memory-limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.flags.settings(func(k string) string { return tt.env[k] })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("settings = %+v, %v; want an error containing %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("settings = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
