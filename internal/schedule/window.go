package schedule

import (
	"fmt"
	"strings"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

// OutsideWindow is the reason a drain waits for its policy's maintenance
// window; InvalidSchedule, for a schedule that cannot be read.
const (
	OutsideWindow   = "OutsideMaintenanceWindow"
	InvalidSchedule = "InvalidSchedule"
)

// Windows are a policy's maintenance windows, read. The zero value (no
// schedule) is always open.
type Windows struct {
	loc   *time.Location
	spans []span
}

// span opens at start minutes after midnight on the days in days and lasts
// length minutes (up to a day, so it may run into the next day).
type span struct {
	days   [7]bool // by time.Weekday
	start  int
	length int
	text   string
}

var weekdays = map[v1alpha1.Weekday]time.Weekday{
	"Sun": time.Sunday, "Mon": time.Monday, "Tue": time.Tuesday, "Wed": time.Wednesday,
	"Thu": time.Thursday, "Fri": time.Friday, "Sat": time.Saturday,
}

// ParseSchedule reads a schedule; nil means no schedule (always open). The
// API server checks the shape; this also checks what it cannot, such as the
// time zone, and says exactly what is wrong.
func ParseSchedule(s *v1alpha1.Schedule) (Windows, error) {
	if s == nil {
		return Windows{}, nil
	}
	if len(s.Windows) == 0 {
		return Windows{}, fmt.Errorf("schedule has no windows: no drain could ever start (remove the schedule to allow drains at any time)")
	}
	zone := s.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil || strings.EqualFold(zone, "local") {
		return Windows{}, fmt.Errorf("schedule.timeZone %q is not a known time zone: use an IANA name such as Europe/Berlin or UTC", s.TimeZone)
	}
	w := Windows{loc: loc}
	for i, mw := range s.Windows {
		start, err := clock(mw.Start, false)
		if err != nil {
			return Windows{}, fmt.Errorf("schedule.windows[%d].start: %w", i, err)
		}
		end, err := clock(mw.End, true)
		if err != nil {
			return Windows{}, fmt.Errorf("schedule.windows[%d].end: %w", i, err)
		}
		if start == end {
			return Windows{}, fmt.Errorf("schedule.windows[%d]: start and end are both %s, an empty window (a whole day is 00:00 to 24:00)", i, mw.Start)
		}
		sp := span{start: start, length: (end - start + 24*60) % (24 * 60), text: mw.Start + "-" + mw.End}
		if end == 24*60 && start == 0 {
			sp.length = 24 * 60
		}
		if len(mw.Days) == 0 {
			for d := range sp.days {
				sp.days[d] = true
			}
		} else {
			names := make([]string, 0, len(mw.Days))
			for _, d := range mw.Days {
				wd, ok := weekdays[d]
				if !ok {
					return Windows{}, fmt.Errorf("schedule.windows[%d].days: %q is not a day (use Mon, Tue, Wed, Thu, Fri, Sat or Sun)", i, d)
				}
				sp.days[wd] = true
				names = append(names, string(d))
			}
			sp.text = strings.Join(names, ",") + " " + sp.text
		}
		w.spans = append(w.spans, sp)
	}
	return w, nil
}

// clock reads "HH:MM" as minutes after midnight; "24:00" only as an end.
func clock(s string, end bool) (int, error) {
	if end && s == "24:00" {
		return 24 * 60, nil
	}
	t, err := time.Parse("15:04", s)
	if err != nil || len(s) != 5 {
		return 0, fmt.Errorf("%q is not a time of day as HH:MM", s)
	}
	return t.Hour()*60 + t.Minute(), nil
}

// Location is the schedule's time zone (UTC without a schedule).
func (w Windows) Location() *time.Location {
	if w.loc == nil {
		return time.UTC
	}
	return w.loc
}

// Always reports whether there is no schedule.
func (w Windows) Always() bool { return len(w.spans) == 0 }

// Open reports whether t is inside a window. Without a schedule it always is.
func (w Windows) Open(t time.Time) bool {
	if w.Always() {
		return true
	}
	open, _, _ := w.scan(t)
	return open
}

// Next is when the next window opens after t (the zero time without a
// schedule). It looks a week ahead, so it always finds one.
func (w Windows) Next(t time.Time) time.Time {
	if w.Always() {
		return time.Time{}
	}
	_, next, _ := w.scan(t)
	return next
}

// Closes is when the windows that hold t close (the zero time when t is in
// none, or without a schedule).
func (w Windows) Closes(t time.Time) time.Time {
	if w.Always() {
		return time.Time{}
	}
	_, _, closes := w.scan(t)
	return closes
}

// scan reports whether t is in a window, the first opening after t, and
// when the windows holding t close. Windows open on local calendar days, so
// a day shortened or lengthened by a daylight saving change is handled by
// the time package.
func (w Windows) scan(t time.Time) (open bool, next, closes time.Time) {
	local := t.In(w.loc)
	for day := -1; day <= 8; day++ {
		d := time.Date(local.Year(), local.Month(), local.Day()+day, 0, 0, 0, 0, w.loc)
		for _, sp := range w.spans {
			if !sp.days[d.Weekday()] {
				continue
			}
			from := time.Date(d.Year(), d.Month(), d.Day(), 0, sp.start, 0, 0, w.loc)
			to := time.Date(d.Year(), d.Month(), d.Day(), 0, sp.start+sp.length, 0, 0, w.loc)
			if !t.Before(from) && t.Before(to) {
				open = true
				if to.After(closes) {
					closes = to
				}
			}
			if from.After(t) && (next.IsZero() || from.Before(next)) {
				next = from
			}
		}
	}
	return open, next, closes
}

// String describes the windows for people, such as
// "Sat,Sun 00:00-24:00, 22:00-04:00 (Europe/Berlin)".
func (w Windows) String() string {
	if w.Always() {
		return "any time"
	}
	parts := make([]string, 0, len(w.spans))
	for _, sp := range w.spans {
		parts = append(parts, sp.text)
	}
	return strings.Join(parts, ", ") + " (" + w.loc.String() + ")"
}
