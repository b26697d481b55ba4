package main

import (
	"bytes"
	"image/png"
	"math"
	"testing"
)

func TestNewAxis(t *testing.T) {
	for _, c := range []struct {
		v         float64
		n         int
		max, step float64
	}{
		{30000, 5, 30000, 10000}, // 6,000 a step rounds up to 10,000
		{31000, 5, 40000, 10000},
		{97.3, 5, 100, 20},
		{112, 5, 125, 25},
		{4.6, 5, 5, 1},
		{0.012, 5, 0.0125, 0.0025},
		{0, 5, 1, 0.2}, // nothing measured: an axis all the same
		{math.NaN(), 5, 1, 0.2},
	} {
		a := newAxis(c.v, c.n)
		if math.Abs(a.max-c.max) > 1e-9*c.max || math.Abs(a.step-c.step) > 1e-9*c.step {
			t.Errorf("newAxis(%v, %d) = max %v step %v; want %v, %v", c.v, c.n, a.max, a.step, c.max, c.step)
		}
		if a.max < c.v {
			t.Errorf("newAxis(%v): max %v below the value", c.v, a.max)
		}
	}
}

func TestAxisTicksAndPixels(t *testing.T) {
	a := axis{max: 30000, step: 10000}
	ticks := a.ticks()
	if len(ticks) != 4 || ticks[0] != 0 || ticks[3] != 30000 {
		t.Errorf("ticks = %v, want 0, 10000, 20000, 30000", ticks)
	}
	// x grows rightwards from 56 to 446; y downwards from 316 up to 30.
	if got := a.pixel(15000, 56, 446); got != 251 {
		t.Errorf("pixel(15000) = %d, want 251 (the middle)", got)
	}
	if got := a.pixel(30000, 316, 30); got != 30 {
		t.Errorf("pixel(max) on a y axis = %d, want 30 (the top)", got)
	}
	if got := a.pixel(0, 316, 30); got != 316 {
		t.Errorf("pixel(0) on a y axis = %d, want 316 (the bottom)", got)
	}
}

func TestTickLabel(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 1000: "1k", 30000: "30k", 2500: "2500", 2.5: "2.5", 100: "100"} {
		if got := tickLabel(v); got != want {
			t.Errorf("tickLabel(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestWritePlot draws one line and finds it where the axes put it.
func TestWritePlot(t *testing.T) {
	var buf bytes.Buffer
	p := panel{title: "RSS", yUnit: "MiB", series: []series{{name: "idle", col: blue, pts: []point{{1000, 50}, {30000, 100}}}}}
	if err := writePlot(&buf, "cluster pods", []panel{p, p}); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != 2*panelW || b.Dy() != plotH {
		t.Fatalf("size %v, want %dx%d", b, 2*panelW, plotH)
	}
	// x axis 0..30k, y axis 0..100: the last point is the top right corner
	// of the plot area, the first at half its height.
	x := newAxis(30000, 5).pixel(30000, marginL, panelW-marginR)
	y := newAxis(100, 5).pixel(100, plotH-marginB, marginT)
	if got := img.At(x, y); got != blue {
		t.Errorf("pixel at the point (%d, %d) = %v, want the line's colour", x, y, got)
	}
	x1 := newAxis(30000, 5).pixel(1000, marginL, panelW-marginR)
	y1 := newAxis(100, 5).pixel(50, plotH-marginB, marginT)
	if got := img.At(x1+panelW, y1); got != blue {
		t.Errorf("pixel at the first point of the second panel (%d, %d) = %v, want the line's colour", x1+panelW, y1, got)
	}
	if got := img.At(x, plotH-marginB-10); got == blue {
		t.Errorf("pixel below the last point is the line's colour: the line is not where the axes put it")
	}
}
