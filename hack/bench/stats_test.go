package main

import (
	"math"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	xs := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {95, 10}, {10, 1}, {100, 10}, {1, 1}} {
		if got := percentile(xs, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := percentile([]float64{7}, 95); got != 7 {
		t.Errorf("one value: got %v, want 7", got)
	}
	if !math.IsNaN(percentile(nil, 50)) {
		t.Error("no values: want NaN")
	}
	if xs[0] != 5 {
		t.Error("percentile sorted its input in place")
	}
}

func TestSpreadOf(t *testing.T) {
	if got := spreadOf([]float64{3, 1, 2}); got != (spread{1, 2, 3}) {
		t.Errorf("odd: got %+v", got)
	}
	if got := spreadOf([]float64{4, 1, math.NaN(), 2, 3}); got != (spread{1, 2.5, 4}) {
		t.Errorf("even with NaN: got %+v", got)
	}
	if got := spreadOf([]float64{math.NaN()}); !math.IsNaN(got.median) {
		t.Errorf("all NaN: got %+v", got)
	}
}

func TestMillis(t *testing.T) {
	got := millis([]time.Duration{1500 * time.Microsecond, time.Second})
	if got[0] != 1.5 || got[1] != 1000 {
		t.Errorf("got %v", got)
	}
}
