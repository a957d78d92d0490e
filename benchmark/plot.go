package benchmark

import (
	"bytes"
	"fmt"
	"html"
	"image"
	"image/color"
	"image/png"
	"math"
	"strconv"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// plot is a chart as lines and texts, drawn either as SVG or as PNG.
type plot struct {
	w, h  int
	lines []plotLine
	texts []plotText
}

type plotLine struct {
	pts   [][2]float64
	color string // #rrggbb
	width float64
}

type plotText struct {
	x, y   float64
	s      string
	anchor string // start, middle, end
	size   int
}

func (p *plot) line(pts [][2]float64, color string, width float64) {
	p.lines = append(p.lines, plotLine{pts: pts, color: color, width: width})
}

func (p *plot) text(x, y float64, s, anchor string, size int) {
	p.texts = append(p.texts, plotText{x: x, y: y, s: s, anchor: anchor, size: size})
}

func (p *plot) svg() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", p.w, p.h)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>` + "\n")
	for _, l := range p.lines {
		pts := make([]string, len(l.pts))
		for i, pt := range l.pts {
			pts[i] = fmt.Sprintf("%.1f,%.1f", pt[0], pt[1])
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%g" points="%s"/>`+"\n", l.color, l.width, strings.Join(pts, " "))
	}
	for _, t := range p.texts {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="%s" font-size="%d">%s</text>`+"\n", t.x, t.y, t.anchor, t.size, html.EscapeString(t.s))
	}
	b.WriteString("</svg>\n")
	return []byte(b.String())
}

// png rasterises the chart: lines by stepping along each segment and
// stamping a square of the line's width; text in a fixed 7×13 bitmap font.
func (p *plot) png() ([]byte, error) {
	img := image.NewRGBA(image.Rect(0, 0, p.w, p.h))
	for i := range img.Pix {
		img.Pix[i] = 0xff
	}
	for _, l := range p.lines {
		c, err := parseHex(l.color)
		if err != nil {
			return nil, err
		}
		half := math.Max(l.width/2, 0.5)
		for i := 1; i < len(l.pts); i++ {
			a, b := l.pts[i-1], l.pts[i]
			steps := int(math.Max(math.Abs(b[0]-a[0]), math.Abs(b[1]-a[1]))) + 1
			for s := 0; s <= steps; s++ {
				f := float64(s) / float64(steps)
				x, y := a[0]+(b[0]-a[0])*f, a[1]+(b[1]-a[1])*f
				for dx := -half + 0.5; dx < half; dx++ {
					for dy := -half + 0.5; dy < half; dy++ {
						img.Set(int(math.Round(x+dx)), int(math.Round(y+dy)), c)
					}
				}
			}
		}
	}
	d := &font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13}
	for _, t := range p.texts {
		s := strings.ReplaceAll(t.s, "−", "-") // the bitmap font is ASCII
		x := t.x
		switch w := float64(d.MeasureString(s).Round()); t.anchor {
		case "middle":
			x -= w / 2
		case "end":
			x -= w
		}
		d.Dot = fixed.P(int(x), int(t.y))
		d.DrawString(s)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func parseHex(s string) (color.RGBA, error) {
	v, err := strconv.ParseUint(strings.TrimPrefix(s, "#"), 16, 32)
	if err != nil || len(s) != 7 {
		return color.RGBA{}, fmt.Errorf("bad colour %q", s)
	}
	return color.RGBA{R: uint8(v >> 16), G: uint8(v >> 8), B: uint8(v), A: 0xff}, nil
}
