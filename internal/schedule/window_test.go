package schedule

import (
	"strings"
	"testing"
	"time"

	"github.com/vacate-dev/vacate/api/v1alpha1"
)

func mustParse(t *testing.T, s *v1alpha1.Schedule) Windows {
	t.Helper()
	w, err := ParseSchedule(s)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWindowsOpenAndNext(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	w := mustParse(t, &v1alpha1.Schedule{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{
		{Days: []v1alpha1.Weekday{"Sat", "Sun"}, Start: "00:00", End: "24:00"},
		{Days: []v1alpha1.Weekday{"Tue"}, Start: "22:00", End: "04:00"}, // over midnight into Wednesday
	}})
	at := func(s string) time.Time {
		v, err := time.ParseInLocation("2006-01-02 15:04", s, berlin)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// 2026-11-24 is a Tuesday.
	for _, tc := range []struct {
		at   string
		open bool
		next string
	}{
		{"2026-11-24 21:59", false, "2026-11-24 22:00"},
		{"2026-11-24 22:00", true, "2026-11-28 00:00"},
		{"2026-11-25 03:59", true, "2026-11-28 00:00"}, // Wednesday morning, still Tuesday's window
		{"2026-11-25 04:00", false, "2026-11-28 00:00"},
		{"2026-11-28 12:00", true, "2026-11-29 00:00"}, // Saturday
		{"2026-11-29 23:59", true, "2026-12-01 22:00"}, // Sunday, before Monday
		{"2026-11-30 00:00", false, "2026-12-01 22:00"},
	} {
		if got := w.Open(at(tc.at)); got != tc.open {
			t.Errorf("Open(%s) = %v, want %v", tc.at, got, tc.open)
		}
		if got := w.Next(at(tc.at)); !got.Equal(at(tc.next)) {
			t.Errorf("Next(%s) = %s, want %s", tc.at, got.In(berlin), tc.next)
		}
	}
	for at0, want := range map[string]string{
		"2026-11-24 23:00": "2026-11-25 04:00", // Tuesday night, over midnight
		"2026-11-28 12:00": "2026-11-29 00:00", // Saturday's window ends at midnight (Sunday's opens then)
	} {
		if got := w.Closes(at(at0)); !got.Equal(at(want)) {
			t.Errorf("Closes(%s) = %s, want %s", at0, got.In(berlin), want)
		}
	}
	if got := w.Closes(at("2026-11-30 12:00")); !got.IsZero() {
		t.Errorf("Closes outside every window = %s, want the zero time", got)
	}
	// The same instant in UTC: the zone decides, not the clock's location.
	if !w.Open(at("2026-11-24 22:30").UTC()) {
		t.Error("an instant given in UTC is not read in the schedule's time zone")
	}
	if got := w.String(); got != "Sat,Sun 00:00-24:00, Tue 22:00-04:00 (Europe/Berlin)" {
		t.Errorf("String() = %q", got)
	}

	// Daylight saving: on 2026-03-29 Berlin skips 02:00-03:00; a 01:00-04:00
	// window lasts two hours that day and is open at 03:30.
	dst := mustParse(t, &v1alpha1.Schedule{TimeZone: "Europe/Berlin", Windows: []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "04:00"}}})
	if !dst.Open(at("2026-03-29 03:30")) || dst.Open(at("2026-03-29 04:00")) {
		t.Error("a window across the daylight saving change is not read in local time")
	}

	// No schedule: always open, nothing to wait for.
	var none Windows
	if !none.Open(at("2026-11-24 12:00")) || !none.Always() || none.String() != "any time" ||
		!none.Next(at("2026-11-24 12:00")).IsZero() || !none.Closes(at("2026-11-24 12:00")).IsZero() {
		t.Error("no schedule must mean any time")
	}
}

func TestParseScheduleErrorsSayWhat(t *testing.T) {
	for _, tc := range []struct {
		s    *v1alpha1.Schedule
		want string
	}{
		{&v1alpha1.Schedule{TimeZone: "Mars/Olympus", Windows: []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "02:00"}}},
			`schedule.timeZone "Mars/Olympus" is not a known time zone: use an IANA name such as Europe/Berlin or UTC`},
		{&v1alpha1.Schedule{TimeZone: "Local", Windows: []v1alpha1.MaintenanceWindow{{Start: "01:00", End: "02:00"}}},
			`schedule.timeZone "Local" is not a known time zone`},
		{&v1alpha1.Schedule{}, "schedule has no windows"},
		{&v1alpha1.Schedule{Windows: []v1alpha1.MaintenanceWindow{{Start: "1:00", End: "02:00"}}},
			`schedule.windows[0].start: "1:00" is not a time of day as HH:MM`},
		{&v1alpha1.Schedule{Windows: []v1alpha1.MaintenanceWindow{{Start: "24:00", End: "02:00"}}},
			`schedule.windows[0].start: "24:00" is not a time of day`},
		{&v1alpha1.Schedule{Windows: []v1alpha1.MaintenanceWindow{{Start: "03:00", End: "03:00"}}},
			"schedule.windows[0]: start and end are both 03:00, an empty window"},
		{&v1alpha1.Schedule{Windows: []v1alpha1.MaintenanceWindow{{Days: []v1alpha1.Weekday{"Funday"}, Start: "03:00", End: "04:00"}}},
			`schedule.windows[0].days: "Funday" is not a day`},
	} {
		_, err := ParseSchedule(tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSchedule(%+v) = %v, want an error containing %q", tc.s, err, tc.want)
		}
	}
}
