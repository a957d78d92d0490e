package benchmark

import (
	"bytes"
	"encoding/xml"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWritePlot(t *testing.T) {
	t.Parallel()
	r := &Report{}
	for i, name := range []string{"fast", "slow"} {
		var ds []time.Duration
		for j := range 1000 {
			ds = append(ds, time.Duration(j*(1+i*100))*time.Microsecond)
		}
		r.Results = append(r.Results, Result{System: name, Lateness: Summarize(ds), lateness: ds})
	}
	dir := t.TempDir()
	tests := []struct {
		file  string
		check func(t *testing.T, raw []byte)
	}{
		{"plot.svg", func(t *testing.T, raw []byte) {
			if err := xml.Unmarshal(raw, new(struct{ XMLName xml.Name })); err != nil {
				t.Fatalf("not XML: %v", err)
			}
			for _, want := range []string{"fast (p99", "slow (p99", "<polyline", "100ms"} {
				if !strings.Contains(string(raw), want) {
					t.Errorf("SVG lacks %q", want)
				}
			}
		}},
		{"plot.png", func(t *testing.T, raw []byte) {
			img, err := png.Decode(bytes.NewReader(raw))
			if err != nil {
				t.Fatalf("not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != 900 || b.Dy() != 520 {
				t.Fatalf("size %v", b)
			}
			// The first series' colour (#1f77b4) must be drawn somewhere.
			found := false
			for y := 0; y < 520 && !found; y++ {
				for x := 0; x < 900; x++ {
					r, g, b, _ := img.At(x, y).RGBA()
					if r>>8 == 0x1f && g>>8 == 0x77 && b>>8 == 0xb4 {
						found = true
						break
					}
				}
			}
			if !found {
				t.Error("no pixel of the first series' colour")
			}
		}},
	}
	for _, tt := range tests {
		path := filepath.Join(dir, tt.file)
		if err := r.WritePlot(path); err != nil {
			t.Fatalf("WritePlot(%s): %v", tt.file, err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		tt.check(t, raw)
	}
	if err := r.WritePlot(filepath.Join(dir, "plot.jpg")); err == nil {
		t.Error("WritePlot(.jpg) succeeded")
	}
}
