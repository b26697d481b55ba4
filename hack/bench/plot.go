package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// point is one measurement on a plot: x cluster pods, y the figure.
type point struct{ x, y float64 }

// series is one line of a panel.
type series struct {
	name   string
	col    color.RGBA
	dashed bool
	pts    []point
}

// panel is one chart: a title, the y axis' unit and its lines, over the
// plot's shared x axis.
type panel struct {
	title  string
	yUnit  string
	series []series
}

// Plot geometry, in pixels.
const (
	panelW   = 460
	plotH    = 360
	marginL  = 56
	marginR  = 16
	marginT  = 30
	marginB  = 44
	tickSize = 4
)

var (
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{220, 220, 220, 255}
	white = color.RGBA{255, 255, 255, 255}
	// Line colours, dark enough on white for readers with colour-blindness
	// too (the Okabe-Ito palette's blue, vermilion and bluish green).
	blue   = color.RGBA{0, 114, 178, 255}
	orange = color.RGBA{213, 94, 0, 255}
	green  = color.RGBA{0, 158, 115, 255}
)

// writePlot draws the panels side by side, each from 0 to a round number
// above its largest value, x being the cluster's pods, and writes a PNG.
func writePlot(w io.Writer, xLabel string, panels []panel) error {
	img := image.NewRGBA(image.Rect(0, 0, panelW*len(panels), plotH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	xMax := 0.0
	for _, p := range panels {
		for _, s := range p.series {
			for _, pt := range s.pts {
				xMax = math.Max(xMax, pt.x)
			}
		}
	}
	xAxis := newAxis(xMax, 5)
	for i, p := range panels {
		drawPanel(img, image.Pt(i*panelW, 0), p, xAxis, xLabel)
	}
	return png.Encode(w, img)
}

// axis maps values from 0 to max onto pixels, with ticks every step.
type axis struct{ max, step float64 }

// newAxis is an axis from 0 to a round number at or above v, with about n
// ticks (steps of 1, 2, 2.5 or 5 times a power of ten).
func newAxis(v float64, n int) axis {
	if v <= 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return axis{max: 1, step: 0.2}
	}
	step := niceStep(v / float64(n))
	return axis{max: step * math.Ceil(v/step-1e-9), step: step}
}

// niceStep is the smallest of 1, 2, 2.5, 5 times a power of ten at or above v.
func niceStep(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ticks are the tick values from 0 to max.
func (a axis) ticks() []float64 {
	var out []float64
	for i := 0; ; i++ {
		v := float64(i) * a.step
		if v > a.max*(1+1e-9) {
			return out
		}
		out = append(out, v)
	}
}

// pixel maps v onto [from, to] (to may be below from: y grows downwards).
func (a axis) pixel(v float64, from, to int) int {
	return from + int(math.Round(v/a.max*float64(to-from)))
}

// tickLabel writes 30000 as "30k", 2.5 as "2.5".
func tickLabel(v float64) string {
	if v >= 1000 && math.Mod(v, 1000) == 0 {
		return strconv.FormatFloat(v/1000, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func drawPanel(img *image.RGBA, at image.Point, p panel, xAxis axis, xLabel string) {
	left, right := at.X+marginL, at.X+panelW-marginR
	top, bottom := at.Y+marginT, at.Y+plotH-marginB
	yMax := 0.0
	for _, s := range p.series {
		for _, pt := range s.pts {
			if !math.IsNaN(pt.y) {
				yMax = math.Max(yMax, pt.y)
			}
		}
	}
	yAxis := newAxis(yMax, 5)
	for _, v := range yAxis.ticks() {
		y := yAxis.pixel(v, bottom, top)
		hline(img, left, right, y, grey)
		hline(img, left-tickSize, left, y, black)
		label := tickLabel(v)
		text(img, left-tickSize-2-7*len(label), y+4, label)
	}
	for _, v := range xAxis.ticks() {
		x := xAxis.pixel(v, left, right)
		vline(img, x, bottom, bottom+tickSize, black)
		label := tickLabel(v)
		text(img, x-7*len(label)/2, bottom+tickSize+13, label)
	}
	hline(img, left, right, bottom, black)
	vline(img, left, top, bottom, black)
	text(img, left, at.Y+18, p.title+" ("+p.yUnit+")")
	text(img, (left+right)/2-7*len(xLabel)/2, at.Y+plotH-8, xLabel)
	for i, s := range p.series {
		var prev image.Point
		for j, pt := range s.pts {
			if math.IsNaN(pt.y) {
				continue
			}
			q := image.Pt(xAxis.pixel(pt.x, left, right), yAxis.pixel(pt.y, bottom, top))
			square(img, q, 3, s.col)
			if j > 0 {
				line(img, prev, q, s.col, s.dashed)
			}
			prev = q
		}
		// The legend, top left inside the panel.
		ly := top + 12 + 16*i
		line(img, image.Pt(left+8, ly-4), image.Pt(left+30, ly-4), s.col, s.dashed)
		text(img, left+36, ly, s.name)
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		img.SetRGBA(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		img.SetRGBA(x, y, c)
	}
}

func square(img *image.RGBA, c image.Point, r int, col color.RGBA) {
	for x := c.X - r; x <= c.X+r; x++ {
		for y := c.Y - r; y <= c.Y+r; y++ {
			img.SetRGBA(x, y, col)
		}
	}
}

// line draws a two-pixel line from a to b, dashed in runs of 6 pixels.
func line(img *image.RGBA, a, b image.Point, c color.RGBA, dashed bool) {
	dx, dy := b.X-a.X, b.Y-a.Y
	n := max(abs(dx), abs(dy))
	for i := 0; i <= n; i++ {
		if dashed && (i/6)%2 == 1 {
			continue
		}
		x := a.X + int(math.Round(float64(dx*i)/float64(max(n, 1))))
		y := a.Y + int(math.Round(float64(dy*i)/float64(max(n, 1))))
		img.SetRGBA(x, y, c)
		img.SetRGBA(x, y+1, c)
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// text writes s with its baseline at (x, y) in a 7x13 pixel font.
func text(img *image.RGBA, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(black), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// scalePanels are the plot of a scale run: RSS (idle and the drain's peak)
// and CPU per eviction against the cluster's pods; before, when set, adds
// the same lines, dashed, from an earlier run's results.
func scalePanels(now, before []scalePhase, nowName, beforeName string) []panel {
	mk := func(phases []scalePhase, get func(scalePhase) float64) []point {
		var pts []point
		for _, ph := range phases {
			pts = append(pts, point{float64(ph.Pods), get(ph)})
		}
		return pts
	}
	idle := func(ph scalePhase) float64 { return float64(ph.IdleRSS) }
	peak := func(ph scalePhase) float64 { return ph.figure(vacateParallel, figPeakRSS) }
	cpu := func(ph scalePhase) float64 { return ph.figure(vacateParallel, figCPUPerEviction) }
	rss := panel{title: "controller RSS", yUnit: "MiB", series: []series{
		{name: "drain peak" + suffix(nowName), col: orange, pts: mk(now, peak)},
		{name: "idle" + suffix(nowName), col: blue, pts: mk(now, idle)},
	}}
	perEv := panel{title: "controller CPU per eviction", yUnit: "ms", series: []series{
		{name: "drain" + suffix(nowName), col: green, pts: mk(now, cpu)},
	}}
	if len(before) > 0 {
		rss.series = append(rss.series,
			series{name: "drain peak" + suffix(beforeName), col: orange, dashed: true, pts: mk(before, peak)},
			series{name: "idle" + suffix(beforeName), col: blue, dashed: true, pts: mk(before, idle)})
		perEv.series = append(perEv.series,
			series{name: "drain" + suffix(beforeName), col: green, dashed: true, pts: mk(before, cpu)})
	}
	return []panel{rss, perEv}
}

func suffix(name string) string {
	if name == "" {
		return ""
	}
	return fmt.Sprintf(", %s", name)
}
